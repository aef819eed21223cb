-- How many samples per second does training process, over the last 50 steps?
SELECT COUNT(*) AS steps,
       SUM(samples) AS samples,
       SUM(wall) AS seconds,
       SUM(samples) / SUM(wall) AS samples_per_s,
       1000 * AVG(wall) AS step_ms
FROM python.steps
WHERE step > (SELECT MAX(step) - 50 FROM python.steps)
