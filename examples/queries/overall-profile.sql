-- Where does the time of the last 8 recorded detail steps go? Self time per module and stage, with its share.
SELECT module, stage,
       COUNT(*) AS executions,
       1000 * AVG(duration) AS avg_ms,
       1000 * SUM(duration) AS total_ms,
       100.0 * SUM(duration) / SUM(SUM(duration)) OVER () AS pct_time
FROM python.torch_trace
WHERE step IN (SELECT step FROM python.steps WHERE detail = 1 ORDER BY step DESC LIMIT 8)
GROUP BY module, stage
ORDER BY total_ms DESC
LIMIT 15
