"""What trains when in an attention transfer: the student's parameter groups, which of them each stage trains, and
their learning rates (a linear warm-up at the start of each stage), stepped by the Trainer as `TransferSchedule`."""

from __future__ import annotations

import torch

from ..models.modeling_performer import PerformerPreTrainedModel
from .transfer_arguments import TransferArguments


def parameter_groups(student, args: TransferArguments) -> dict[str, list[torch.nn.Parameter]]:
    """Student parameters by role: the projections E, F; each layer's W^Q, W^K, W^V; everything else."""
    groups = {"projections": [], "attention": [], "rest": []}
    for name, parameter in student.named_parameters():
        if "projection" in name:
            groups["projections"].append(parameter)
        elif ".attention.self." in name:
            groups["attention"].append(parameter)
        else:
            groups["rest"].append(parameter)
    if args.layer_steps and isinstance(student, PerformerPreTrainedModel) and not args.train_attention_weights:
        raise ValueError(
            "Stage 1 has nothing to train for a Performer student: FAVOR+ has no parameters of its own (its random "
            "features are a fixed buffer, redrawn, never trained), and with the softmax kernel it already estimates "
            "the teacher's attention from the teacher's W^Q, W^K, W^V. Pass --train_attention_weights to adapt "
            "W^Q, W^K, W^V to the features, or --layer_steps 0 to train end to end only."
        )
    if args.layer_steps and not groups["projections"] and not args.train_attention_weights:
        raise ValueError(
            "Stage 1 has nothing to train: the student's projections are frozen or parameter-free (mean/max pooling). "
            "Pass --train_attention_weights, or convert without --freeze_projections."
        )
    return groups


def trained_groups(args: TransferArguments, step: int) -> set[str]:
    """The parameter groups that train at `step`: E, F (and optionally W^Q, W^K, W^V) in stage 1, all in stage 2."""
    if args.stage_of(step) == "end_to_end":
        return {"projections", "attention", "rest"}
    return {"projections", "attention"} if args.train_attention_weights else {"projections"}


def default_projection_learning_rate(n: int) -> float:
    """1e-3 at n = 512, scaled by 512 / n.

    Adam moves every entry of E (k x n) by about the learning rate per step, whatever its gradient, so a compressed key,
    a sum over n positions, drifts more per step the longer n is. Measured on all-MiniLM-L6-v2 at n = 2048, k = 512
    (docs/results/long-inputs-minilm.md): 1e-3 raised the stage-1 loss at L = 2048 from 0.27 to 0.47-0.65 within 30
    steps; 2e-4 lowered it to 0.20 in 15.
    """
    return 1e-3 * 512 / n


def learning_rates(args: TransferArguments, step: int) -> dict[str, float]:
    """Each group's learning rate at `step` (0 freezes it): linear warm-up at the start of each stage."""
    if args.stage_of(step) == "layer":
        warmup = min(1.0, (step + 1) / max(1, args.warmup_steps))
        return {
            "projections": args.projection_learning_rate * warmup,
            "attention": args.attention_learning_rate * warmup if args.train_attention_weights else 0.0,
            "rest": 0.0,
        }
    warmup = min(1.0, (step - args.layer_steps + 1) / max(1, args.warmup_steps))
    rate = args.end_to_end_learning_rate * warmup
    return {"projections": rate, "attention": rate, "rest": rate}


class TransferSchedule(torch.optim.lr_scheduler.LRScheduler):
    """Each parameter group's learning rate at update ``last_epoch`` (0-based): `transfer_schedule.learning_rates`,
    a linear warm-up at the start of each stage. The Trainer steps it after each update and keeps it in its
    checkpoints. `at` sets it to an update index: the Trainer holds a schedule still after a skipped update (non-finite
    gradients, as the fp16 grad scaler does), but a transfer's stages and warm-ups count every update."""

    def __init__(self, optimizer, args: TransferArguments):
        self.transfer_args = args
        super().__init__(optimizer)

    def get_lr(self) -> list[float]:
        rates = learning_rates(self.transfer_args, self.last_epoch)
        return [rates[group["name"]] for group in self.optimizer.param_groups]

    def at(self, step: int) -> None:
        self.last_epoch = step
        self._last_lr = self.get_lr()
        for group, rate in zip(self.optimizer.param_groups, self._last_lr, strict=True):
            group["lr"] = rate

    def state_dict(self) -> dict:  # numbers only: the Trainer loads it with weights_only=True
        return {"last_epoch": self.last_epoch, "_step_count": self._step_count, "_last_lr": self._last_lr}

    def load_state_dict(self, state_dict: dict) -> None:
        self.__dict__.update(state_dict)
