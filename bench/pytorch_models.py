"""The PyTorch twins of dtrain's zoo models and data used by the side-by-side benchmarks
(same layers, shapes and parameter counts as src/dtrain/models and src/dtrain/data), and
the plain training pass and test accuracy those benchmarks share."""
import gzip
import struct

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = struct.unpack(">" + "I" * ndim, data[4 : 4 + 4 * ndim])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def fashion_mnist(data_dir, limit_train, limit_test):
    """Normalized by the training split's mean and std, like dtrain's loader."""
    def images(name, limit):
        return torch.from_numpy(read_idx(f"{data_dir}/{name}")[:limit].copy()).float().div_(255).unsqueeze(1)

    def labels(name, limit):
        return torch.from_numpy(read_idx(f"{data_dir}/{name}")[:limit].astype(np.int64))

    x, tx = images("train-images-idx3-ubyte.gz", limit_train), images("t10k-images-idx3-ubyte.gz", limit_test)
    y, ty = labels("train-labels-idx1-ubyte.gz", limit_train), labels("t10k-labels-idx1-ubyte.gz", limit_test)
    mean, std = x.mean(), x.std()
    return (x - mean) / std, y, (tx - mean) / std, ty


def synthetic(shape, classes, n, seed=0):
    """Class prototypes plus Gaussian noise, as `--dataset synthetic` (not the same draws)."""
    g = torch.Generator().manual_seed(seed)
    protos = torch.randn((classes, *shape), generator=g)
    def make(count):
        y = torch.randint(0, classes, (count,), generator=g)
        return protos[y] + 1.5 * torch.randn((count, *shape), generator=g), y
    x, y = make(n)
    tx, ty = make(max(1, n // 5))
    return x, y, tx, ty


def cnn():
    return nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Dropout(0.25),
        nn.Linear(128, 10))


def conv_bn(cin, cout, kernel, stride, activation=True):
    layers = [nn.Conv2d(cin, cout, kernel, stride, (kernel - 1) // 2, bias=False), nn.BatchNorm2d(cout)]
    return nn.Sequential(*layers, nn.ReLU(inplace=True)) if activation else nn.Sequential(*layers)


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.body = nn.Sequential(conv_bn(cin, cout, 3, stride), conv_bn(cout, cout, 3, 1, activation=False))
        self.shortcut = (conv_bn(cin, cout, 1, stride, activation=False)
                         if stride != 1 or cin != cout else nn.Identity())

    def forward(self, x):
        return torch.relu(self.body(x) + self.shortcut(x))


def resnet18(in_channels=3, classes=10):
    """The CIFAR ResNet-18 of dtrain's zoo: 3x3 stem, no max-pool, 11,173,962 parameters."""
    blocks = [conv_bn(in_channels, 64, 3, 1)]
    cin = 64
    for stage, width in enumerate((64, 128, 256, 512)):
        for b in range(2):
            blocks.append(BasicBlock(cin, width, 2 if stage > 0 and b == 0 else 1))
            cin = width
    blocks.append(nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, classes)))
    return nn.Sequential(*blocks)


def mlp_blocks(inputs, depth, hidden=512, classes=10):
    """dtrain's mlp as its blocks: fc1 (flatten, linear, relu), fc2..fcN, head."""
    blocks = [nn.Sequential(nn.Flatten(), nn.Linear(inputs, hidden), nn.ReLU())]
    blocks += [nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU()) for _ in range(depth - 1)]
    blocks.append(nn.Linear(hidden, classes))
    return blocks


def train_pass(model, optimizer, x, y, order, batch_size, drop_last=False):
    """One pass over the samples `order` in batches of `batch_size` (the last partial one
    dropped when `drop_last`): cross-entropy, backward, an optimizer step each. Returns the
    loss summed over samples, the samples and the steps."""
    model.train()
    loss_sum, seen, steps = 0.0, 0, 0
    end = len(order) - batch_size + 1 if drop_last else len(order)
    for i in range(0, end, batch_size):
        idx = order[i : i + batch_size]
        loss = F.cross_entropy(model(x[idx]), y[idx])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        loss_sum += loss.item() * len(idx)
        seen += len(idx)
        steps += 1
    return loss_sum, seen, steps


def test_accuracy(model, tx, ty, chunk=500):
    """The share of `tx` whose arg-max class is `ty`, evaluated in chunks."""
    model.eval()
    with torch.no_grad():
        correct = sum((model(tx[i : i + chunk]).argmax(1) == ty[i : i + chunk]).sum().item()
                      for i in range(0, len(ty), chunk))
    return correct / len(ty)


class RobertaEmbeddings(nn.Module):
    def __init__(self, vocab, hidden, max_positions, pad_id, eps, dropout):
        super().__init__()
        self.pad_id = pad_id
        self.word_embeddings = nn.Embedding(vocab, hidden, padding_idx=pad_id)
        self.position_embeddings = nn.Embedding(max_positions, hidden, padding_idx=pad_id)
        self.token_type_embeddings = nn.Embedding(1, hidden)
        self.LayerNorm = nn.LayerNorm(hidden, eps=eps)
        self.dropout = nn.Dropout(dropout)

    def forward(self, ids):
        real = (ids != self.pad_id).long()
        positions = torch.cumsum(real, 1) * real + self.pad_id  # numbered from pad_id + 1
        x = self.word_embeddings(ids) + self.position_embeddings(positions)
        return self.dropout(self.LayerNorm(x + self.token_type_embeddings.weight[0]))


class RobertaLayer(nn.Module):
    """Post-LayerNorm self-attention and feed-forward with exact GELU (no padding mask: the
    benchmarks' sequences are all real tokens)."""

    def __init__(self, hidden, heads, ffn, eps, dropout):
        super().__init__()
        self.heads, self.p = heads, dropout
        self.query, self.key, self.value, self.attention_output = (
            nn.Linear(hidden, hidden) for _ in range(4))
        self.attention_norm = nn.LayerNorm(hidden, eps=eps)
        self.intermediate, self.output = nn.Linear(hidden, ffn), nn.Linear(ffn, hidden)
        self.output_norm = nn.LayerNorm(hidden, eps=eps)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        b, t, h = x.shape
        split = lambda y: y.view(b, t, self.heads, h // self.heads).transpose(1, 2)
        a = F.scaled_dot_product_attention(split(self.query(x)), split(self.key(x)),
                                           split(self.value(x)),
                                           dropout_p=self.p if self.training else 0.0)
        a = a.transpose(1, 2).reshape(b, t, h)
        x = self.attention_norm(x + self.dropout(self.attention_output(a)))
        y = self.output(F.gelu(self.intermediate(x)))
        return self.output_norm(x + self.dropout(y))


class RobertaHead(nn.Module):
    def __init__(self, hidden, classes, dropout):
        super().__init__()
        self.dense, self.out_proj = nn.Linear(hidden, hidden), nn.Linear(hidden, classes)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        x = torch.tanh(self.dense(self.dropout(x[:, 0])))
        return self.out_proj(self.dropout(x))


def roberta(layers=12, hidden=768, heads=12, ffn=0, vocab=50265, classes=2, max_positions=514,
            pad_id=1, eps=1e-5, dropout=0.1):
    """dtrain's roberta (roberta-base's sizes by default: 124,647,170 parameters with two
    classes) as blocks: embeddings, layer0..layerN-1, classifier."""
    return nn.Sequential(
        RobertaEmbeddings(vocab, hidden, max_positions, pad_id, eps, dropout),
        *(RobertaLayer(hidden, heads, ffn or 4 * hidden, eps, dropout) for _ in range(layers)),
        RobertaHead(hidden, classes, dropout))
