"""Step boundaries of a training job that also evaluates: training steps end at optimizer.step()
however many forwards they run (gradient accumulation, a forward under no_grad for a target),
and an evaluation loop under no_grad after training gets one step per forward again, so no step
(and no detail step) takes the whole evaluation (docs/tables.md, python.torch_trace `step`)."""

EVAL_BATCHES = 600
STRETCH_MIN = 512  # PB_EVAL_STRETCH_MIN in src/agent/hot/torch_hooks.c


def root_forwards_and_optimizer(cli, run):
    """[(step, root forwards, has an optimizer row)] for every step, in order."""
    return [(r["step"], r["forwards"], r["optimizer"]) for r in cli.query(run.target(), """
        SELECT s.step,
               (SELECT COUNT(*) FROM python.torch_trace t WHERE t.step = s.step AND t.depth = 0
                  AND t.stage = 'forward' AND t.module = 'Sequential') AS forwards,
               (SELECT COUNT(*) FROM python.torch_trace t WHERE t.step = s.step
                  AND t.stage = 'step') AS optimizer
        FROM python.steps s ORDER BY s.step""")]


def test_evaluation_after_training_gets_a_step_per_forward(cli, traced, env):
    run = traced("train_then_eval.py", "--steps", 20, "--eval-batches", EVAL_BATCHES,
                 "--steps-after", 5, "--accumulate", 2, "--print-every", 1,
                 env=dict(env, PROBING_DETAIL_EVERY="1"))
    run.wait_holding()
    assert "eval done" in run.stdout()
    steps = root_forwards_and_optimizer(cli, run)
    assert [s for s, _, _ in steps] == list(range(len(steps)))
    training = [(s, f) for s, f, opt in steps if opt]
    # Every training step ends at its optimizer step: 20 before the evaluation, 5 after. A
    # training step runs 4 forwards of the model (2 micro-batches, each with a no_grad target),
    # the first one too (the optimizer exists before it: no forward ends a step), and the first
    # after the evaluation starts at its first forward with autograd on (its no_grad target
    # forward before that ends the evaluation's last step).
    assert [f for _, f in training] == [4] * 20 + [3] + [4] * 4, training
    # step numbers count optimizer steps, as the framework's own counters do
    assert [s for s, _ in training[:20]] == list(range(20))
    # The evaluation: 600 forwards (and the next training step's leading no_grad forward) in
    # steps of one forward each, after a first one that takes the stretch's minimum (512 no_grad
    # forwards: a shorter evaluation pass stays in its training step) and one more.
    last_before, first_after = training[19][0], training[20][0]
    evaluation = [f for s, f, opt in steps if last_before < s < first_after]
    assert sum(evaluation) == EVAL_BATCHES + 1
    assert evaluation == [STRETCH_MIN + 1] + [1] * (EVAL_BATCHES - STRETCH_MIN), evaluation[:10]
    run.finish()


def test_inference_and_plain_training_unchanged(cli, traced):
    """No optimizer: every forward is a step. Training with gradient accumulation: every step
    ends at optimizer.step(), the first one too."""
    inference = traced("inference.py", "--steps", 30, "--print-every", 0)
    training = traced("train_then_eval.py", "--steps", 12, "--eval-batches", 0, "--steps-after",
                      0, "--accumulate", 3, "--print-every", 0)
    inference.wait_holding()
    training.wait_holding()
    # 30 forwards: 29 steps ended by the next forward, the last one still open
    assert cli.scalar(inference.target(), "SELECT COUNT(*) FROM python.steps") == 29
    # 3 micro-batches a step (gradient accumulation), the first one too: once an optimizer
    # exists, only optimizer.step() ends a step, so there are as many steps as optimizer steps
    assert cli.scalar(training.target(), "SELECT COUNT(*) FROM python.steps") == 12
    inference.finish()
    training.finish()
