-- How busy are the GPUs, per device, over the last minute? (Empty without an NVIDIA driver: see 'probing <target> tables'.)
SELECT device,
       AVG(utilization) AS avg_utilization_pct,
       MAX(memory_used_mb) AS max_memory_used_mb,
       MAX(memory_total_mb) AS memory_total_mb,
       MAX(temperature_c) AS max_temperature_c,
       AVG(power_w) AS avg_power_w
FROM system.gpu
WHERE time > (SELECT MAX(time) - 60 FROM system.gpu)
GROUP BY device
ORDER BY device
