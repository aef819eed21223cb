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
    # training step runs 4 forwards of the model (2 micro-batches, each with a no_grad target).
    # The first is split (before any optimizer step, each forward starts a step), and the first
    # after the evaluation starts at its first forward with autograd on (its no_grad target
    # forward before that ends the evaluation's last step).
    assert [f for _, f in training] == [1] + [4] * 19 + [3] + [4] * 4, training
    # The evaluation: 600 forwards (and the next training step's leading no_grad forward) in
    # steps of one forward each, after a first one that takes the stretch's minimum (512 no_grad
    # forwards: a shorter evaluation pass stays in its training step) and one more.
    last_before, first_after = training[19][0], training[20][0]
    evaluation = [f for s, f, opt in steps if last_before < s < first_after]
    assert sum(evaluation) == EVAL_BATCHES + 1
    assert evaluation == [STRETCH_MIN + 1] + [1] * (EVAL_BATCHES - STRETCH_MIN), evaluation[:10]
    run.finish()


def test_inference_and_plain_training_unchanged(cli, traced):
    """No optimizer: every forward is a step. Training without no_grad forwards: every step ends
    at optimizer.step()."""
    inference = traced("inference.py", "--steps", 30, "--print-every", 0)
    training = traced("train_then_eval.py", "--steps", 12, "--eval-batches", 0, "--steps-after",
                      0, "--accumulate", 3, "--print-every", 0)
    inference.wait_holding()
    training.wait_holding()
    # 30 forwards: 29 steps ended by the next forward, the last one still open
    assert cli.scalar(inference.target(), "SELECT COUNT(*) FROM python.steps") == 29
    # 3 micro-batches a step; the first step is split before the first optimizer step is seen
    # (6 forwards: 3 no_grad targets and 3 with autograd, each starting a step): 6 + 11 steps
    assert cli.scalar(training.target(), "SELECT COUNT(*) FROM python.steps") == 6 + 11
    inference.finish()
    training.finish()
