-- Which 5 modules cost the most per step (their own forward and backward time, nested modules left out)?
SELECT module, type,
       1000 * SUM(duration) / COUNT(DISTINCT step) AS ms_per_step,
       COUNT(DISTINCT step) AS steps
FROM python.torch_trace
WHERE stage IN ('forward', 'backward')
GROUP BY module, type
ORDER BY ms_per_step DESC
LIMIT 5
