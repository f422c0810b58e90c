"""What stops a training run safely, shared by pretraining, fine-tuning and attention transfer.

- **Divergence.** `DivergenceGuard` counts updates whose loss or gradients (after unscaling) are non-finite. Such an
  update is skipped (the weights and the optimizer's moments stay as they were; under fp16 the grad scaler skips it
  and lowers its scale), so an isolated overflow costs one update; ``nonfinite_patience`` of them in a row stop the
  run with `TrainingDiverged`, naming the step, the last good checkpoint and what to try. `check_weights_finite` is
  called before every save: no checkpoint, ``final/`` or ``best/`` is written from non-finite weights, and
  `DivergenceGuard.check_finished` before the final one: a run that ends inside a streak of skipped updates, or whose
  final evaluation is not finite, publishes nothing and raises `TrainingDiverged` too. An optional
  loss-spike rule (a loss above ``loss_spike_factor`` times the running median) warns or stops.
- **Preemption.** `StopSignal` turns SIGTERM / SIGINT into a flag. The loops read it after each update, agreed over
  all processes (one all-reduce of a scalar), so every rank stops after the same update, saves its part of the
  checkpoint through the usual atomic path and raises `errors.Preempted`; the command exits with
  `errors.RESUMABLE_EXIT_CODE`. A second signal ends the process at once (the handlers are the previous ones again).
"""

from __future__ import annotations

import logging
import math
import os
import signal
import statistics
from collections import deque

import torch

from .errors import TrainingDiverged

logger = logging.getLogger(__name__)

# Below this many finite losses the running median is not trusted yet (the first updates fall fast).
SPIKE_MIN_HISTORY = 10


def resume_hint(flag: str, without_checkpoint: str):
    """A `DivergenceGuard.resume_hint`: resume from the last good checkpoint with ``flag``, or (none written)
    ``without_checkpoint``."""

    def hint(checkpoint: str | None) -> str:
        if checkpoint is None:
            return f"No checkpoint was written before it: {without_checkpoint}"
        return (
            f"The last good checkpoint is {checkpoint}; resume from it with {flag} {checkpoint} after changing one of "
            f"these"
        )

    return hint


def gradients_finite(parameters) -> bool:
    """Whether every gradient is finite (the total norm is). Call once per update, after unscaling."""
    grads = [p.grad for p in parameters if p.grad is not None]
    if not grads:
        return True
    return bool(torch.isfinite(torch.nn.utils.get_total_norm(grads)).item())


def weights_finite(model) -> bool:
    flags = [torch.isfinite(p).all() for p in model.parameters()]
    return bool(torch.stack(flags).all().item()) if flags else True


class DivergenceGuard:
    """Counts non-finite updates in a row and stops the run after ``patience`` of them; watches for loss spikes.

    ``advice`` ends the error: what to change (flag names differ between the commands). ``resume_hint(checkpoint)``
    says where to go on from (the checkpoint may be None: none was written); `resume_hint` makes one.
    ``last_good_checkpoint`` is kept up to date by the caller.
    """

    def __init__(
        self,
        patience: int,
        advice: str,
        resume_hint,
        spike_factor: float | None = None,
        spike_action: str = "warn",
        spike_window: int = 100,
        last_good_checkpoint: str | None = None,
    ):
        self.patience, self.advice, self.resume_hint = patience, advice, resume_hint
        self.spike_factor, self.spike_action = spike_factor, spike_action
        self.recent: deque[float] = deque(maxlen=spike_window)
        self.streak = 0
        self.first_bad_step: int | None = None
        self.last_good_checkpoint = last_good_checkpoint

    def where_to_resume(self) -> str:
        return self.resume_hint(self.last_good_checkpoint)

    def after_update(self, step: int, loss: float | None, gradients_ok: bool = True) -> None:
        """Record update ``step`` (1-based; ``loss`` None where the loop does not see it); raise `TrainingDiverged`
        when the run must stop."""
        loss_ok = loss is None or math.isfinite(loss)
        if loss_ok and gradients_ok:
            self.streak, self.first_bad_step = 0, None
            if loss is not None:
                self._check_spike(step, float(loss))
            return
        self.streak += 1
        if self.first_bad_step is None:
            self.first_bad_step = step
        what = "loss" if not loss_ok else "gradients"
        if self.streak < self.patience:
            logger.warning(
                "Update %d: non-finite %s, update skipped (%d in a row; the run stops at %d).",
                step,
                what,
                self.streak,
                self.patience,
            )
            return
        raise TrainingDiverged(
            f"training diverged at step {step}: the loss or gradients were non-finite on {self.streak} consecutive "
            f"updates (steps {self.first_bad_step}-{step}), so the run stopped without saving. "
            f"{self.where_to_resume()}. Try {self.advice}."
        )

    def check_finished(self, step: int, what: str, evaluation: dict[str, float] | None = None) -> None:
        """Before the run publishes ``what`` (its final model) as good, after its last update ``step``: raise
        `TrainingDiverged` if the run ended inside a streak of skipped updates (short of ``patience``, which would
        have stopped it) or a value of its final ``evaluation`` ({what it is: value}) is not finite."""
        if self.streak:
            reason = (
                f"the run ended at step {step} after {self.streak} non-finite updates in a row "
                f"(steps {self.first_bad_step}-{step}, each skipped)"
            )
        else:
            nonfinite = [
                f"{name} at step {step} is {value}"
                for name, value in (evaluation or {}).items()
                if not math.isfinite(value)
            ]
            if not nonfinite:
                return
            more = f" (and {len(nonfinite) - 3} more)" if len(nonfinite) > 3 else ""
            reason = f"the final {', '.join(nonfinite[:3])}{more}"
        raise TrainingDiverged(
            f"training diverged: {reason}, so {what} was not written. {self.where_to_resume()}. Try {self.advice}."
        )

    def _check_spike(self, step: int, loss: float) -> None:
        if self.spike_factor is None:
            return
        if len(self.recent) >= SPIKE_MIN_HISTORY:
            median = statistics.median(self.recent)
            if loss > self.spike_factor * median:
                message = (
                    f"loss spike at step {step}: {loss:.4g} is above {self.spike_factor:g} x the running median "
                    f"{median:.4g} of the last {len(self.recent)} updates"
                )
                if self.spike_action == "stop":
                    raise TrainingDiverged(
                        f"{message}; the run stopped without saving. {self.where_to_resume()}. Try {self.advice}."
                    )
                logger.warning("%s.", message)
                return  # a spike does not move the median it is compared with
        self.recent.append(loss)


def check_weights_finite(model, what: str, guard: DivergenceGuard | None = None) -> None:
    """Refuse to save ``what`` (a checkpoint, the final model) from non-finite weights."""
    if weights_finite(model):
        return
    where = guard.where_to_resume() if guard is not None else "Start from an earlier checkpoint"
    advice = f" Try {guard.advice}." if guard is not None else ""
    raise TrainingDiverged(f"the weights are non-finite (NaN or inf): {what} was not written. {where}.{advice}")


class StopSignal:
    """SIGTERM / SIGINT as a flag the training loop reads between updates (`requested`), from `install` to
    `restore`. The first signal sets the flag and puts the previous handlers back, so a second one acts at once."""

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self):
        self.received: int | None = None
        self._previous: dict[int, object] = {}

    def install(self) -> StopSignal:
        for signum in self.SIGNALS:
            try:
                self._previous[signum] = signal.signal(signum, self._handle)
            except ValueError:  # not the main thread: leave the signals alone
                pass
        return self

    def _handle(self, signum, frame) -> None:
        self.received = signum
        self.restore()
        # os.write, not print: a handler may interrupt a print in progress
        os.write(
            2,
            f"\n{self.name} received: stopping after the current update, with a checkpoint (send it again to stop at "
            f"once, without one)\n".encode(),
        )

    def restore(self) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()

    @property
    def name(self) -> str:
        return signal.Signals(self.received).name if self.received else "a stop signal"

    def requested(self, accelerator=None) -> bool:
        """Whether any process got a signal. With several processes, every one must call this at the same point (an
        all-reduce): all then stop after the same update."""
        flag = self.received is not None
        if accelerator is None or accelerator.num_processes == 1:
            return flag
        total = accelerator.reduce(torch.tensor(float(flag), device=accelerator.device), reduction="sum")
        return bool(total.item() > 0)


def divergence_callback(guard: DivergenceGuard, update_loss=None):
    """The guard as a `transformers.TrainerCallback`, for the runs on the `Trainer` (pretraining, fine-tuning).

    Before each optimizer step (the Trainer has unscaled and measured the gradients by then): non-finite gradients
    are dropped, so AdamW leaves the weights and its moments as they were, and the step is marked skipped, as the
    fp16 grad scaler marks its own skips, so that the Trainer does not advance the learning-rate schedule either.
    After the step: the guard counts it (with the update's loss, from ``update_loss()`` where given: its spikes are
    watched too), and a save due now is refused if the weights are non-finite.
    """
    from transformers import TrainerCallback

    class DivergenceCallback(TrainerCallback):
        def __init__(self):
            self.gradients_ok = True

        def on_pre_optimizer_step(self, args, state, control, model=None, optimizer=None, **kwargs):
            self.gradients_ok = gradients_finite(model.parameters())
            if args.fp16:  # the grad scaler skips the step, and says so, itself
                return
            if not self.gradients_ok:
                for parameter in model.parameters():
                    parameter.grad = None
            # accelerate's optimizer wrapper reports `step_was_skipped` from this flag, which only its grad scaler
            # sets; the Trainer steps the schedule unless it is set.
            if hasattr(optimizer, "_is_overflow"):
                optimizer._is_overflow = not self.gradients_ok

        def on_step_end(self, args, state, control, model=None, **kwargs):
            guard.after_update(state.global_step, update_loss() if update_loss else None, self.gradients_ok)
            if control.should_save:
                check_weights_finite(model, f"the checkpoint of step {state.global_step}", guard)

    return DivergenceCallback()


def skip_the_stopped_epochs_end(state, control):
    """After a stop in the middle of an epoch, the Trainer still ends that epoch (`on_epoch_end`), which with
    per-epoch evaluation evaluates and saves once more: an evaluation an uninterrupted run never makes, which could
    become its best model. The stop's checkpoint is already written, so the epoch's end does nothing."""
    if state.epoch is not None and not float(state.epoch).is_integer():
        control.should_evaluate = False
        control.should_save = False
    return control


def stop_after_steps_callback(steps: int):
    """A `TrainerCallback` that stops training after ``steps`` updates with a checkpoint, as an interruption would."""
    from transformers import TrainerCallback

    class StopAfterSteps(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step >= steps:
                control.should_training_stop = True
                control.should_save = True
            return control

    return StopAfterSteps()


def stop_signal_callback(stop: StopSignal):
    """A `TrainerCallback` that ends training after the update during which SIGTERM / SIGINT came (`StopSignal`,
    agreed over the processes of its `accelerator`, set once the Trainer has made one), with a checkpoint;
    `stopped_at` then holds that update.

    A signal during the last update is left to the end of the run: the run has no update left to lose, and what is
    left (the last evaluation, best/, the predictions) is what a resume from that checkpoint would do.
    """
    from transformers import TrainerCallback

    class StopOnSignal(TrainerCallback):
        accelerator = None
        stopped_at: int | None = None

        def on_step_end(self, args, state, control, **kwargs):
            # Every process reads the flag at the same point (an all-reduce with several): all stop together.
            if state.global_step < state.max_steps and stop.requested(self.accelerator):
                control.should_training_stop = True
                control.should_save = True
                self.stopped_at = state.global_step
            return control

        def on_epoch_end(self, args, state, control, **kwargs):
            return skip_the_stopped_epochs_end(state, control) if self.stopped_at is not None else control

    return StopOnSignal()
