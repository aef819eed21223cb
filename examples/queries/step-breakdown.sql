-- How does each of the last 10 steps split into data wait, forward, backward, optimizer, collectives and the rest (ms)?
SELECT step,
       1000 * wall AS wall_ms,
       1000 * data_wait AS data_wait_ms,
       1000 * forward AS forward_ms,
       1000 * backward AS backward_ms,
       1000 * optimizer AS optimizer_ms,
       1000 * (collectives + grad_sync) AS communication_ms,
       1000 * other AS other_ms,
       detail
FROM python.steps
WHERE step > (SELECT MAX(step) - 10 FROM python.steps)
ORDER BY step
