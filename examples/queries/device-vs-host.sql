-- On a GPU, how long did the device take for each of the last 10 steps and their phases, beside the host's time (ms)? (empty without CUDA)
SELECT d.step,
       1000 * s.wall AS host_ms,
       1000 * d.wall AS device_ms,
       1000 * d.forward AS device_forward_ms,
       1000 * d.backward AS device_backward_ms,
       1000 * d.optimizer AS device_optimizer_ms,
       1000 * (d.collectives + d.grad_sync) AS device_communication_ms,
       1000 * d.other AS device_other_ms,
       1000 * d.lag AS device_behind_ms,
       1000 * d.sync_wait AS sync_wait_ms
FROM python.device_steps d JOIN python.steps s ON s.step = d.step
WHERE d.step > (SELECT MAX(step) - 10 FROM python.device_steps)
ORDER BY d.step
