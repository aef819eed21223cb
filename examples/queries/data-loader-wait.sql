-- Is the loop waiting for data? Share of step time spent blocked in the DataLoader, and the loader's settings.
SELECT COUNT(*) AS steps,
       1000 * AVG(s.data_wait) AS data_wait_ms,
       1000 * AVG(s.wall) AS wall_ms,
       100.0 * SUM(s.data_wait) / SUM(s.wall) AS pct_waiting,
       (SELECT MAX(num_workers) FROM python.dataloader_trace) AS num_workers,
       (SELECT MAX(pin_memory) FROM python.dataloader_trace) AS pin_memory
FROM python.steps AS s
WHERE s.step > 0
