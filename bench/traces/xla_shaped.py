#!/usr/bin/env python3
"""Writes xla_training.csv.xz: the device allocations of a JAX training loop as XLA makes them, built
from XLA's allocation structure rather than recorded (JAX with a GPU cannot run here). README.md
says what each phase stands for. Deterministic. Usage: xla_shaped.py [OUTPUT.csv.xz]
"""
import lzma
import os
import random
import sys

F32 = 4
I32 = 4


class Trace:
    """Rows of the replay-log CSV (the columns gpumem's GPUMEM_TRACE writes), with addresses that never
    repeat while a block lives, and a clock that moves 1 us a row."""

    def __init__(self):
        self.rows = ["Thread,Time,Action,Pointer,Size,Stream,Device,Reserved,Limit"]
        self.next_address = 0x7F0000000000
        self.time = 1_800_000_000.0
        self.live = {}

    def allocate(self, size):
        address = self.next_address
        self.next_address += (size + 511) // 512 * 512 + 512
        self.live[address] = size
        self._row("allocate", address, size)
        return address

    def free(self, address):
        self._row("free", address, self.live.pop(address))

    def _row(self, action, address, size):
        self.time += 1e-6
        self.rows.append(f"1,{self.time:.6f},{action},{address:#x},{size},0,0,,")


def parameter_shapes(vocab, seq, d_model, layers):
    """A GPT-shaped decoder's parameters, in the order a pytree flattens them (embeddings, then each
    layer's norms, attention and MLP, then the final norm; the output head shares the embedding)."""
    shapes = [(vocab, d_model), (seq, d_model)]
    for _ in range(layers):
        shapes += [(d_model,), (d_model,), (d_model, 3 * d_model), (3 * d_model,), (d_model, d_model), (d_model,),
                   (d_model,), (d_model,), (d_model, 4 * d_model), (4 * d_model,), (4 * d_model, d_model), (d_model,)]
    return shapes + [(d_model,), (d_model,)]


def elements(shape):
    count = 1
    for n in shape:
        count *= n
    return count


def training_temp_bytes(batch, seq, d_model, heads, layers, vocab):
    """XLA's buffer assignment packs a step's temporaries into one allocation of their peak: what the
    forward pass keeps for the backward one (per layer: input, two norms, qkv, attention weights,
    attention output, the MLP's two hidden tensors), the logits and their gradient, and the gradients
    (one per parameter) before the optimizer folds them in."""
    tokens = batch * seq
    per_layer = tokens * d_model * (1 + 2 + 3 + 1) + tokens * 4 * d_model * 2 + batch * heads * seq * seq
    return (layers * per_layer + 2 * tokens * vocab) * F32


def eval_temp_bytes(batch, seq, d_model, heads, vocab):
    """Forward only: one layer's tensors at a time, and the logits."""
    tokens = batch * seq
    return (tokens * d_model * 7 + tokens * 4 * d_model * 2 + batch * heads * seq * seq + tokens * vocab) * F32


def xla_training(steps=60, eval_every=10, batch=4, eval_batch=8, seq=512, d_model=512, heads=8, layers=8,
                 vocab=16000):
    rng = random.Random(3)
    trace = Trace()
    # Initialisation: the parameters (one buffer each, the init computation's outputs), then the
    # optimizer's state (Adam: two moments per parameter, and a step count).
    params = [trace.allocate(elements(shape) * F32) for shape in parameter_shapes(vocab, seq, d_model, layers)]
    moments = [trace.allocate(trace.live[p]) for p in params for _ in range(2)]
    count = trace.allocate(I32)
    # Compilation: the autotuner tries the step's GEMMs with scratch workspaces of several sizes.
    for _ in range(24):
        scratch = trace.allocate(rng.choice([1, 4, 8, 16, 32, 64, 128]) * 2**20 + rng.randrange(0, 4096) * 256)
        trace.free(scratch)
    train_temp = training_temp_bytes(batch, seq, d_model, heads, layers, vocab)
    eval_temp = eval_temp_bytes(eval_batch, seq, d_model, heads, vocab)
    losses = []
    # The input pipeline keeps the next batch on the device while a step runs (prefetch of 2).
    in_flight = [(trace.allocate(batch * seq * I32), trace.allocate(batch * seq * I32))]
    for step in range(steps):
        in_flight.append((trace.allocate(batch * seq * I32), trace.allocate(batch * seq * I32)))
        tokens, targets = in_flight.pop(0)
        # The step: parameters, moments and count are donated, so their outputs reuse their buffers;
        # the temporaries come and go with the execution; the loss and the gradient norm are new.
        temp = trace.allocate(train_temp)
        outputs = [trace.allocate(F32), trace.allocate(F32)]
        trace.free(temp)
        trace.free(tokens)
        trace.free(targets)
        losses.extend(outputs)
        if (step + 1) % eval_every == 0:
            # Logged: the step's scalars leave the device; an evaluation runs its own executable.
            for scalar in losses:
                trace.free(scalar)
            losses = []
            eval_tokens = trace.allocate(eval_batch * seq * I32)
            temp = trace.allocate(eval_temp)
            eval_loss = trace.allocate(F32)
            trace.free(temp)
            trace.free(eval_tokens)
            trace.free(eval_loss)
    for tokens, targets in in_flight:
        trace.free(tokens)
        trace.free(targets)
    for address in losses + params + moments + [count]:
        trace.free(address)
    assert not trace.live
    return trace


def main():
    output = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                                 "xla_training.csv.xz")
    trace = xla_training()
    with lzma.open(output, "wt", preset=9) as out:
        out.write("\n".join(trace.rows) + "\n")
    print(f"xla_training: {len(trace.rows) - 1} rows -> {output}")


if __name__ == "__main__":
    main()
