// dtrain._C: the codecs of the CLI, for Python. Thin on purpose: every function calls the
// same compress:: code the CLI's wire uses, tensors cross without a copy (torch's own
// pybind11 caster), packets come back as uint8 tensors that own the encoder's buffer, and
// the GIL is released while coding so other Python threads (DDP's hooks) keep running.
// Errors: a bad codec name, a non-floating tensor or NaN/Inf raise ValueError, as does a
// corrupt packet (CorruptPacket), with the reason.
#include <torch/csrc/utils/pybind.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "dtrain/compress/codec.h"
#include "dtrain/compress/error_feedback.h"

namespace py = pybind11;

namespace dtrain::python {
namespace {

// The packet's bytes become the tensor's storage; the deleter keeps the vector alive.
at::Tensor to_tensor(compress::Packet&& packet) {
  auto owner = std::make_shared<compress::Packet>(std::move(packet));
  const auto size = static_cast<int64_t>(owner->size());
  return at::from_blob(
      owner->data(), {size}, [owner](void*) mutable { owner.reset(); },
      at::TensorOptions().dtype(at::kByte));
}

// A packet tensor as bytes on the CPU: 1-D uint8 (a GPU packet is copied to the host).
at::Tensor packet_bytes_of(const at::Tensor& packet) {
  if (packet.scalar_type() != at::kByte || packet.dim() != 1) {
    throw std::invalid_argument("a packet is a 1-D uint8 tensor (from dtrain.encode), got " +
                                std::string(c10::toString(packet.scalar_type())) + " with " +
                                std::to_string(packet.dim()) + " dimensions");
  }
  return packet.to(at::kCPU).contiguous();
}

at::Tensor encode(const at::Tensor& tensor, const std::string& codec_name, int threads) {
  const auto codec = compress::make_codec(codec_name);
  return to_tensor(compress::encode(*codec, tensor, threads));
}

at::Tensor decode(const at::Tensor& packet, const std::optional<c10::Device>& device, int threads) {
  const at::Tensor bytes = packet_bytes_of(packet);
  // On a GPU the payload is copied there and decoded there (compress/tensor_coding.h).
  return compress::decode(bytes.data_ptr<uint8_t>(), static_cast<size_t>(bytes.numel()), threads,
                          device.value_or(c10::Device(c10::kCPU)));
}

py::dict inspect(const at::Tensor& packet) {
  const at::Tensor bytes = packet_bytes_of(packet);
  const compress::PacketInfo info =
      compress::inspect(bytes.data_ptr<uint8_t>(), static_cast<size_t>(bytes.numel()));
  py::dict d;
  d["codec"] = compress::to_string(info.spec);
  d["dtype"] = std::string(c10::toString(info.dtype));
  d["shape"] = info.shape;
  d["numel"] = info.numel;
  d["header_bytes"] = info.header_bytes;
  d["table_bytes"] = info.table_bytes;
  d["payload_bytes"] = info.payload_bytes;
  return d;
}

size_t packet_size(const std::string& codec_name, const std::vector<int64_t>& shape) {
  return compress::packet_size(*compress::make_codec(codec_name), shape);
}

// Error feedback with its codec: encode(x) codes x + residual and keeps what was lost.
class FeedbackEncoder {
 public:
  explicit FeedbackEncoder(const std::string& codec_name)
      : codec_(compress::make_codec(codec_name)) {}

  std::pair<at::Tensor, at::Tensor> encode(const at::Tensor& tensor) {
    at::Tensor decoded;
    compress::Packet packet = feedback_.encode(*codec_, tensor, decoded);
    return {to_tensor(std::move(packet)), decoded};
  }
  at::Tensor residual() const { return feedback_.residual(); }
  void reset() { feedback_.reset(); }
  std::string codec() const { return compress::to_string(codec_->spec()); }

 private:
  std::unique_ptr<compress::Codec> codec_;
  compress::ErrorFeedback feedback_;
};

}  // namespace
}  // namespace dtrain::python

PYBIND11_MODULE(_C, m) {
  using namespace dtrain;
  using namespace dtrain::python;
  m.doc() = "dtrain's codecs (the C++ core the CLI links); see the dtrain package";
  m.attr("__version__") = DTRAIN_VERSION;
  m.attr("torch_version") = DTRAIN_TORCH_VERSION;

  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const compress::CorruptPacket& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    }
  });

  const auto release = py::call_guard<py::gil_scoped_release>();
  m.def("encode", &encode, py::arg("tensor"), py::arg("codec"), py::arg("threads") = 1, release,
        "Encodes a floating tensor into a packet (1-D uint8 tensor).");
  m.def("decode", &decode, py::arg("packet"), py::arg("device") = py::none(),
        py::arg("threads") = 1, release,
        "Decodes a packet into a tensor of its original dtype and shape.");
  m.def("inspect", &inspect, py::arg("packet"), "The packet's header fields, validated.");
  m.def("packet_size", &packet_size, py::arg("codec"), py::arg("shape"),
        "Exact packet bytes for a tensor of this shape under this codec.");
  m.def(
      "canonical_codec",
      [](const std::string& name) { return compress::to_string(compress::parse_codec(name)); },
      py::arg("codec"), "The codec's canonical name (sortquant:8 -> sortquant:6:2).");
  m.def("codec_help", &compress::codec_help, "One line per codec family.");

  py::class_<FeedbackEncoder>(m, "FeedbackEncoder")
      .def(py::init<const std::string&>(), py::arg("codec"))
      .def("encode", &FeedbackEncoder::encode, py::arg("tensor"), release,
           "Encodes tensor + residual; returns (packet, decoded) and keeps the new residual.")
      .def_property_readonly("residual", &FeedbackEncoder::residual)
      .def_property_readonly("codec", &FeedbackEncoder::codec)
      .def("reset", &FeedbackEncoder::reset);
}
