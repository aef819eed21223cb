-- Is mixed precision on? Autocast dtype and device, GradScaler scale and skipped steps, over all optimizer steps.
SELECT autocast_enabled, autocast_dtype, autocast_device,
       COUNT(*) AS optimizer_steps,
       MIN(scale) AS min_scale, MAX(scale) AS max_scale,
       SUM(skipped) AS skipped_steps
FROM python.amp_trace
GROUP BY autocast_enabled, autocast_dtype, autocast_device
ORDER BY optimizer_steps DESC
