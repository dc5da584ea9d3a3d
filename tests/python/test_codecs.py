"""dtrain.encode / decode against the CLI's packets and against the values themselves."""

import subprocess

import pytest
import torch

import dtrain

CODECS = ["none", "fp16", "bf16", "uniform:8", "uniform:3", "sortquant:8", "sortquant:6:2",
          "sortquant:12", "sortquant:4", "kmeans:4", "kmeans:2:5", "tile:4", "rot:tile:2",
          "rot:64:sortquant:4"]


def sample(shape=(3, 50, 7), seed=0):
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=generator)


@pytest.mark.parametrize("codec", CODECS)
def test_round_trip_keeps_shape_dtype_and_bounds_the_error(codec):
    x = sample()
    packet = dtrain.encode(x, codec)
    assert packet.dtype == torch.uint8 and packet.dim() == 1
    assert packet.numel() == dtrain.packet_size(codec, x.shape)
    y = dtrain.decode(packet)
    assert y.shape == x.shape and y.dtype == x.dtype
    mse = float(((x - y) ** 2).mean())
    if codec == "none":
        assert torch.equal(x, y)
    elif codec in ("fp16", "bf16"):
        assert mse < 1e-4
    else:  # a quantizer of >= 2 bits: far better than predicting the mean, yet lossy
        assert 0 < mse < 0.2 * float(x.var())


# One codec of each family and parameter form (each costs two CLI runs).
CLI_CODECS = ["none", "fp16", "bf16", "uniform:3", "sortquant:8", "sortquant:3:1", "kmeans:2:5",
              "rot:tile:2"]


@pytest.mark.parametrize("codec", CLI_CODECS)
def test_packets_are_the_bytes_the_cli_writes(codec, tmp_path, dtrain_binary):
    x = sample(seed=1)
    raw, cli_packet = tmp_path / "x.f32", tmp_path / "x.pkt"
    x.numpy().tofile(raw)
    shape = ",".join(str(d) for d in x.shape)
    subprocess.run([dtrain_binary, "codec", "encode", "--codec", codec, "--shape", shape,
                    str(raw), str(cli_packet)], check=True, capture_output=True)
    ours = dtrain.encode(x, codec)
    assert cli_packet.read_bytes() == ours.numpy().tobytes()

    # And the CLI decodes our packet to the values we decode.
    ours_path, decoded = tmp_path / "ours.pkt", tmp_path / "ours.f32"
    ours.numpy().tofile(ours_path)
    subprocess.run([dtrain_binary, "codec", "decode", str(ours_path), str(decoded)], check=True,
                   capture_output=True)
    cli_values = torch.frombuffer(bytearray(decoded.read_bytes()), dtype=torch.float32)
    assert torch.equal(cli_values.view(x.shape), dtrain.decode(ours))


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.bfloat16])
def test_other_dtypes_come_back_as_themselves(dtype):
    x = sample().to(dtype)
    y = dtrain.decode(dtrain.encode(x, "sortquant:8"))
    assert y.dtype == dtype and y.shape == x.shape
    assert float(((x.float() - y.float()) ** 2).mean()) < 0.01


def test_non_contiguous_and_requires_grad_inputs():
    base = sample((40, 30)).requires_grad_()
    x = base.t()
    assert not x.is_contiguous()
    assert torch.equal(dtrain.decode(dtrain.encode(x, "none")), x.detach())


@pytest.mark.parametrize("codec", ["sortquant:8", "uniform:3", "kmeans:4:5"])
def test_threads_give_the_same_packet_and_values(codec):
    x = sample((3, 700_001), seed=1)  # 2.1M values: coded in chunks on 2 and 3 threads
    packet = dtrain.encode(x, codec)
    values = dtrain.decode(packet)
    for threads in (2, 3):
        assert torch.equal(dtrain.encode(x, codec, threads=threads), packet)
        assert torch.equal(dtrain.decode(packet, threads=threads), values)
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="threads"):
            dtrain.encode(x, codec, threads=bad)
        with pytest.raises(ValueError, match="threads"):
            dtrain.decode(packet, threads=bad)


def test_the_cli_codes_on_threads_to_the_same_bytes(tmp_path, dtrain_binary):
    x = sample((2, 1_100_000), seed=2)
    raw, cli_packet, cli_values = tmp_path / "x.f32", tmp_path / "x.pkt", tmp_path / "y.f32"
    x.numpy().tofile(raw)
    subprocess.run([dtrain_binary, "codec", "encode", "--codec", "sortquant:8", "--shape",
                    "2,1100000", "--threads", "3", str(raw), str(cli_packet)], check=True,
                   capture_output=True)
    packet = dtrain.encode(x, "sortquant:8")
    assert cli_packet.read_bytes() == packet.numpy().tobytes()
    subprocess.run([dtrain_binary, "codec", "decode", "--threads", "2", str(cli_packet),
                    str(cli_values)], check=True, capture_output=True)
    values = torch.frombuffer(bytearray(cli_values.read_bytes()), dtype=torch.float32)
    assert torch.equal(values.view(x.shape), dtrain.decode(packet))
    bad = subprocess.run([dtrain_binary, "codec", "decode", "--threads", "0", str(cli_packet),
                          str(cli_values)], capture_output=True, text=True)
    assert bad.returncode != 0 and "--threads" in bad.stderr


def test_inspect_and_canonical_names():
    x = sample((4, 1000))
    info = dtrain.inspect(dtrain.encode(x, "sortquant:8"))
    assert info["codec"] == "sortquant:6:2" == dtrain.canonical_codec("sortquant:8")
    assert info["shape"] == [4, 1000] and info["numel"] == 4000
    assert info["dtype"] == "Float"
    total = info["header_bytes"] + info["table_bytes"] + info["payload_bytes"]
    assert total == dtrain.packet_size("sortquant:8", [4, 1000])
    assert info["payload_bytes"] == 4000  # 8 bits a value
    assert "sortquant" in dtrain.codec_help()


def test_feedback_encoder_keeps_what_was_lost():
    encoder = dtrain._C.FeedbackEncoder("uniform:2")
    x = sample((1000,))
    packet, decoded = encoder.encode(x)
    assert torch.allclose(encoder.residual, x - decoded)
    _, second = encoder.encode(x)
    # The second step codes x + residual: over two steps, the sum tracks 2x better.
    assert float((decoded + second - 2 * x).abs().mean()) < float((2 * decoded - 2 * x).abs().mean())


def test_bad_input_raises_value_error_with_the_reason():
    x = sample((10,))
    with pytest.raises(ValueError, match="uniform:0"):
        dtrain.encode(x, "uniform:0")
    with pytest.raises(ValueError, match="unknown codec|codec"):
        dtrain.encode(x, "zip")
    with pytest.raises(ValueError, match="NaN or Inf"):
        dtrain.encode(torch.tensor([1.0, float("nan")]), "sortquant:8")
    with pytest.raises(ValueError, match="floating"):
        dtrain.encode(torch.arange(10), "fp16")
    with pytest.raises(TypeError):
        dtrain.encode([1.0, 2.0], "fp16")
    with pytest.raises(TypeError):
        dtrain.encode(x, 8)


def test_corrupt_packets_raise_value_error():
    packet = dtrain.encode(sample((100,)), "sortquant:8")
    bad_magic = packet.clone()
    bad_magic[0] ^= 0xFF
    with pytest.raises(ValueError, match="packet"):
        dtrain.decode(bad_magic)
    with pytest.raises(ValueError, match="packet"):
        dtrain.decode(packet[: packet.numel() - 1].clone())
    with pytest.raises(ValueError, match="packet"):
        dtrain.decode(packet[:10].clone())
    with pytest.raises(ValueError, match="uint8"):
        dtrain.decode(packet.float())
    # Flip every byte of the header in turn: an error or a tensor, never a crash.
    for i in range(40):
        flipped = packet.clone()
        flipped[i] ^= 0x5A
        try:
            dtrain.decode(flipped)
        except ValueError:
            pass


def test_cli_codec_errors_are_clear(tmp_path, dtrain_binary):
    raw = tmp_path / "x.f32"
    sample((10,)).numpy().tofile(raw)
    wrong = subprocess.run([dtrain_binary, "codec", "encode", "--shape", "3,4", str(raw),
                            str(tmp_path / "x.pkt")], capture_output=True, text=True)
    assert wrong.returncode != 0 and "40 bytes" in wrong.stderr and "needs 48" in wrong.stderr
    corrupt = tmp_path / "bad.pkt"
    corrupt.write_bytes(b"DTCK" + bytes(20))
    bad = subprocess.run([dtrain_binary, "codec", "inspect", str(corrupt)], capture_output=True,
                         text=True)
    assert bad.returncode != 0 and "packet" in bad.stderr
