-- How much time and memory do the attention modules take, per module (forward and backward self time per execution)?
SELECT module, type,
       1000 * AVG(CASE WHEN stage = 'forward' THEN duration END) AS forward_ms,
       1000 * AVG(CASE WHEN stage = 'backward' THEN duration END) AS backward_ms,
       AVG(allocated) AS avg_allocated_mb
FROM python.torch_trace
WHERE type LIKE '%Attention%' OR module LIKE '%attn%' OR module LIKE '%attention%'
GROUP BY module, type
ORDER BY forward_ms + COALESCE(backward_ms, 0) DESC
