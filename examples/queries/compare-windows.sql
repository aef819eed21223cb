-- Did training slow down? Mean step time and its parts in steps 100-110 against steps 200-210 (edit the two ranges).
SELECT CASE WHEN step BETWEEN 100 AND 110 THEN 'before' ELSE 'after' END AS period,
       MIN(step) AS first_step, MAX(step) AS last_step, COUNT(*) AS steps,
       1000 * AVG(wall) AS wall_ms,
       1000 * AVG(data_wait) AS data_wait_ms,
       1000 * AVG(forward + backward + optimizer) AS compute_ms,
       1000 * AVG(other) AS other_ms
FROM python.steps
WHERE step BETWEEN 100 AND 110 OR step BETWEEN 200 AND 210
GROUP BY period
ORDER BY first_step
