-- How long do collectives take, per operation and origin (the program's calls or DDP's gradient buckets)?
SELECT operation_type, origin,
       COUNT(*) AS calls,
       SUM(bytes) / 1048576.0 AS total_mb,
       AVG(duration_ms) AS avg_ms,
       MAX(duration_ms) AS max_ms,
       SUM(duration_ms) AS total_ms
FROM python.nccl_trace
GROUP BY operation_type, origin
ORDER BY total_ms DESC
