"""An independent RoBERTa reference for tests/unit/roberta_test.cpp.

Reads a safetensors weights file (Hugging Face's names) and a safetensors file of inputs
("ids" int64 [B, T], "mask" uint8 [B, T]) with its own reader, computes
RobertaForSequenceClassification's logits in eval mode with plain torch operations (an
explicit softmax over masked scores, not scaled_dot_product_attention), and writes them as
"logits" float32 [B, C] to a safetensors file.

usage: roberta_reference.py WEIGHTS INPUTS OUTPUT HEADS PAD_ID EPS
"""
import json
import math
import struct
import sys

import torch

DTYPES = {"F32": torch.float32, "F64": torch.float64, "I64": torch.int64, "U8": torch.uint8}


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    body = data[8 + n :]
    out = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        t = torch.frombuffer(bytearray(body[begin:end]), dtype=DTYPES[entry["dtype"]])
        out[name] = t.reshape(entry["shape"]).clone()
    return out


def write_safetensors(path, tensors):
    header, chunks, offset = {}, [], 0
    for name, t in tensors.items():
        raw = t.contiguous().numpy().tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    text = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(chunks))


def layer_norm(x, w, b, eps):
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + eps) * w + b


def linear(x, w, name):
    return x @ w[name + ".weight"].T + w[name + ".bias"]


def logits(w, ids, mask, heads, pad, eps):
    p = "roberta.embeddings."
    real = (ids != pad).long()
    positions = torch.cumsum(real, 1) * real + pad
    x = w[p + "word_embeddings.weight"][ids] + w[p + "position_embeddings.weight"][positions]
    x = x + w[p + "token_type_embeddings.weight"][0]
    x = layer_norm(x, w[p + "LayerNorm.weight"], w[p + "LayerNorm.bias"], eps)
    batch, length, hidden = x.shape
    d = hidden // heads
    bias = torch.zeros(batch, 1, 1, length, dtype=x.dtype)
    bias[mask.view(batch, 1, 1, length) == 0] = -1e30
    layer = 0
    while f"roberta.encoder.layer.{layer}.attention.self.query.weight" in w:
        p = f"roberta.encoder.layer.{layer}."

        def heads_of(t):
            return t.view(batch, length, heads, d).transpose(1, 2)

        q = heads_of(linear(x, w, p + "attention.self.query"))
        k = heads_of(linear(x, w, p + "attention.self.key"))
        v = heads_of(linear(x, w, p + "attention.self.value"))
        scores = q @ k.transpose(-1, -2) / math.sqrt(d) + bias
        context = (torch.softmax(scores, -1) @ v).transpose(1, 2).reshape(batch, length, hidden)
        a = layer_norm(
            linear(context, w, p + "attention.output.dense") + x,
            w[p + "attention.output.LayerNorm.weight"],
            w[p + "attention.output.LayerNorm.bias"],
            eps,
        )
        inner = linear(a, w, p + "intermediate.dense")
        inner = 0.5 * inner * (1 + torch.erf(inner / math.sqrt(2)))  # exact GELU
        x = layer_norm(
            linear(inner, w, p + "output.dense") + a,
            w[p + "output.LayerNorm.weight"],
            w[p + "output.LayerNorm.bias"],
            eps,
        )
        layer += 1
    h = torch.tanh(linear(x[:, 0], w, "classifier.dense"))
    return linear(h, w, "classifier.out_proj")


def main():
    weights_path, inputs_path, output_path = sys.argv[1:4]
    heads, pad, eps = int(sys.argv[4]), int(sys.argv[5]), float(sys.argv[6])
    w = {k: v.double() for k, v in read_safetensors(weights_path).items()}
    inputs = read_safetensors(inputs_path)
    out = logits(w, inputs["ids"], inputs["mask"], heads, pad, eps)
    write_safetensors(output_path, {"logits": out.float()})


if __name__ == "__main__":
    main()
