-- Which modules run while memory is highest? Memory (MB; on CPU the process RSS) as each module's forward ends, and its time.
SELECT module, type,
       COUNT(*) AS executions,
       AVG(allocated) AS avg_allocated_mb,
       MAX(max_allocated) AS peak_mb,
       1000 * AVG(total_duration) AS avg_ms
FROM python.torch_trace
WHERE stage = 'forward'
GROUP BY module, type
ORDER BY peak_mb DESC, avg_allocated_mb DESC
LIMIT 10
