-- What does training memory hold: parameters, gradients and optimizer state (MB), as of the last measured step?
SELECT step, optimizer, device, params,
       param_bytes / 1048576.0 AS params_mb,
       grad_bytes / 1048576.0 AS grads_mb,
       state_bytes / 1048576.0 AS optimizer_state_mb,
       (param_bytes + grad_bytes + state_bytes) / 1048576.0 AS total_mb
FROM python.memory_breakdown
WHERE step = (SELECT MAX(step) FROM python.memory_breakdown)
ORDER BY total_mb DESC
