#!/usr/bin/python3
"""The PyTorch CPU workloads whose tensor allocations bench/traces/ keeps (record.sh runs them under
alloc_logger.so). Deterministic: fixed seeds, two threads. Usage: workloads.py transformer|cnn|inference|serving
"""
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
torch.set_num_threads(2)


def transformer_training(iterations=6):
    """A 4-layer encoder language model (d_model 256, 8 heads, vocab 8000), batch 16 x 128 tokens, Adam."""
    vocab, d_model, seq, batch = 8000, 256, 128, 16
    embed = nn.Embedding(vocab, d_model)
    layer = nn.TransformerEncoderLayer(d_model, 8, dim_feedforward=1024, dropout=0.1, batch_first=True)
    encoder = nn.TransformerEncoder(layer, num_layers=4)
    head = nn.Linear(d_model, vocab)
    params = list(embed.parameters()) + list(encoder.parameters()) + list(head.parameters())
    optimizer = torch.optim.Adam(params, lr=1e-4)
    mask = nn.Transformer.generate_square_subsequent_mask(seq)
    for _ in range(iterations):
        tokens = torch.randint(0, vocab, (batch, seq + 1))
        hidden = encoder(embed(tokens[:, :-1]), mask=mask)
        loss = F.cross_entropy(head(hidden).reshape(-1, vocab), tokens[:, 1:].reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()


class Block(nn.Module):
    def __init__(self, channels_in, channels_out, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(channels_in, channels_out, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels_out)
        self.conv2 = nn.Conv2d(channels_out, channels_out, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels_out)
        self.skip = (nn.Sequential(nn.Conv2d(channels_in, channels_out, 1, stride, bias=False),
                                   nn.BatchNorm2d(channels_out))
                     if stride != 1 or channels_in != channels_out else nn.Identity())

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(y)) + self.skip(x))


def cnn_training(iterations=5):
    """A ResNet-18-shaped network (widths 32-256) on batch 32 of 3x64x64 images, 100 classes, SGD with momentum."""
    model = nn.Sequential(
        nn.Conv2d(3, 32, 3, 1, 1, bias=False), nn.BatchNorm2d(32), nn.ReLU(),
        Block(32, 32, 1), Block(32, 32, 1), Block(32, 64, 2), Block(64, 64, 1),
        Block(64, 128, 2), Block(128, 128, 1), Block(128, 256, 2), Block(256, 256, 1),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(256, 100))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    for _ in range(iterations):
        images = torch.randn(32, 3, 64, 64)
        labels = torch.randint(0, 100, (32,))
        loss = F.cross_entropy(model(images), labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()


def variable_length_inference(requests=40):
    """A 6-layer encoder (d_model 384, 6 heads) serving batches of 1-8 sequences of 16-512 tokens, no grad."""
    vocab, d_model = 16000, 384
    embed = nn.Embedding(vocab, d_model)
    layer = nn.TransformerEncoderLayer(d_model, 6, dim_feedforward=1536, batch_first=True)
    encoder = nn.TransformerEncoder(layer, num_layers=6).eval()
    head = nn.Linear(d_model, vocab)
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for _ in range(requests):
            batch = int(torch.randint(1, 9, (1,), generator=generator))
            seq = int(torch.randint(16, 513, (1,), generator=generator))
            tokens = torch.randint(0, vocab, (batch, seq), generator=generator)
            logits = head(encoder(embed(tokens)))
            logits.argmax(-1)


class PagedDecoder(nn.Module):
    """A decoder whose keys and values live in a paged cache allocated once, as vLLM keeps them."""

    def __init__(self, vocab, d_model, heads, layers, ffn):
        super().__init__()
        self.heads, self.head_dim = heads, d_model // heads
        self.embed = nn.Embedding(vocab, d_model)
        self.qkv = nn.ModuleList(nn.Linear(d_model, 3 * d_model) for _ in range(layers))
        self.out = nn.ModuleList(nn.Linear(d_model, d_model) for _ in range(layers))
        self.up = nn.ModuleList(nn.Linear(d_model, ffn) for _ in range(layers))
        self.down = nn.ModuleList(nn.Linear(ffn, d_model) for _ in range(layers))
        self.norm = nn.ModuleList(nn.LayerNorm(d_model) for _ in range(2 * layers))
        self.head = nn.Linear(d_model, vocab)

    def forward(self, tokens, positions, slots, seq_slots, caches):
        """tokens, positions, slots: one entry per token of the batch (slot: where its key and value
        go in the cache); seq_slots: per sequence, its tokens' range in the batch and the cache slots
        of its whole context. Returns the logits of each sequence's last token."""
        x = self.embed(tokens)
        for layer, (k_cache, v_cache) in enumerate(caches):
            h = self.norm[2 * layer](x)
            q, k, v = self.qkv[layer](h).view(len(tokens), 3, self.heads, self.head_dim).unbind(1)
            k_cache.index_copy_(0, slots, k)
            v_cache.index_copy_(0, slots, v)
            attended = []
            for first, last, context in seq_slots:
                keys, values = k_cache.index_select(0, context), v_cache.index_select(0, context)
                scores = torch.einsum("qhd,khd->hqk", q[first:last], keys) / self.head_dim ** 0.5
                causal = torch.ones(last - first, len(context), dtype=torch.bool).tril(len(context) - (last - first))
                weights = scores.masked_fill(~causal, float("-inf")).softmax(-1)
                attended.append(torch.einsum("hqk,khd->qhd", weights, values))
            x = x + self.out[layer](torch.cat(attended).flatten(1))
            x = x + self.down[layer](F.gelu(self.up[layer](self.norm[2 * layer + 1](x))))
        last_tokens = torch.tensor([last - 1 for _, last, _ in seq_slots])
        return self.head(x.index_select(0, last_tokens))


def paged_serving(requests=48, block=16, max_seqs=12, max_tokens=1024):
    """vLLM-shaped serving: weights, a profiling pass at the largest batch, a paged KV cache allocated
    once from what the profile left, then continuous batching of requests (prompts of 16-768 tokens,
    8-160 generated): a step prefills waiting requests up to max_tokens, else decodes one token of each
    running sequence; sampled tokens and logits are made and dropped at every step."""
    vocab, d_model, heads, layers = 16000, 384, 6, 4
    model = PagedDecoder(vocab, d_model, heads, layers, 4 * d_model).eval()
    generator = torch.Generator().manual_seed(2)
    blocks = 1200  # cache blocks of `block` tokens: 19,200 token slots

    def no_cache(tokens):
        # The profiling pass: one batch of max_tokens tokens, as vLLM sizes its cache from the peak.
        return [(torch.empty(tokens, heads, d_model // heads), torch.empty(tokens, heads, d_model // heads))
                for _ in range(layers)]

    with torch.no_grad():
        profile_caches = no_cache(max_tokens)
        tokens = torch.randint(0, vocab, (max_tokens,), generator=generator)
        model(tokens, torch.arange(max_tokens), torch.arange(max_tokens), [(0, max_tokens, torch.arange(max_tokens))],
              profile_caches)
        del profile_caches, tokens
        caches = [(torch.zeros(blocks * block, heads, d_model // heads), torch.zeros(blocks * block, heads, d_model // heads))
                  for _ in range(layers)]
        free_blocks = list(range(blocks))
        waiting = [(int(torch.randint(16, 769, (1,), generator=generator)), int(torch.randint(8, 161, (1,), generator=generator)))
                   for _ in range(requests)]
        running = []  # [prompt tokens, tokens so far, tokens to generate, its blocks]

        def slots_of(seq, start, stop):
            return torch.tensor([seq[3][i // block] * block + i % block for i in range(start, stop)])

        while waiting or running:
            batch = []
            # Prefill first, within the token budget and the free blocks; else decode every running one.
            budget = max_tokens
            while waiting and len(running) < max_seqs and waiting[0][0] <= budget:
                prompt, to_generate = waiting[0]
                needed = (prompt + to_generate + block - 1) // block
                if needed > len(free_blocks):
                    break
                waiting.pop(0)
                seq = [prompt, 0, to_generate, [free_blocks.pop() for _ in range(needed)]]
                running.append(seq)
                batch.append((seq, 0, prompt))
                budget -= prompt
            if not batch:
                batch = [(seq, seq[0] + seq[1] - 1, seq[0] + seq[1]) for seq in running]
            tokens = torch.randint(0, vocab, (sum(stop - start for _, start, stop in batch),), generator=generator)
            positions = torch.cat([torch.arange(start, stop) for _, start, stop in batch])
            slots = torch.cat([slots_of(seq, start, stop) for seq, start, stop in batch])
            seq_slots, first = [], 0
            for seq, start, stop in batch:
                seq_slots.append((first, first + stop - start, slots_of(seq, 0, stop)))
                first += stop - start
            logits = model(tokens, positions, slots, seq_slots, caches)
            sampled = torch.multinomial(logits.softmax(-1), 1, generator=generator)
            del logits, sampled, tokens, positions, slots, seq_slots
            for seq, _, _ in batch:
                seq[1] += 1
            for seq in [seq for seq in running if seq[1] >= seq[2]]:
                running.remove(seq)
                free_blocks.extend(seq[3])


WORKLOADS = {"transformer": transformer_training, "cnn": cnn_training, "inference": variable_length_inference,
             "serving": paged_serving}

if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in WORKLOADS:
        sys.exit(f"workloads.py: expected one of {', '.join(WORKLOADS)}, got {' '.join(sys.argv[1:]) or 'nothing'}")
    WORKLOADS[sys.argv[1]]()
