#!/usr/bin/python3
"""The PyTorch CPU workloads whose tensor allocations bench/traces/ keeps (record.sh runs them under
alloc_logger.so). Deterministic: fixed seeds, two threads. Usage: workloads.py transformer|cnn|inference
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


WORKLOADS = {"transformer": transformer_training, "cnn": cnn_training, "inference": variable_length_inference}

if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in WORKLOADS:
        sys.exit(f"workloads.py: expected one of {', '.join(WORKLOADS)}, got {' '.join(sys.argv[1:]) or 'nothing'}")
    WORKLOADS[sys.argv[1]]()
