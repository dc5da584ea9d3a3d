#include "dtrain/parallel/codec_timing.h"

#include <ATen/ATen.h>

#include <algorithm>

#include "dtrain/metrics/timer.h"

namespace dtrain::parallel {

CandidateCost time_codec(const compress::CodecSpec& spec, const at::Tensor& sample) {
  const auto codec = compress::make_codec(spec);
  CandidateCost c{spec, 0, 1e30, 1e30};
  for (int rep = 0; rep < 2; ++rep) {
    auto t0 = metrics::Clock::now();
    const auto packet = compress::encode(*codec, sample);
    c.encode_s = std::min(c.encode_s, metrics::since(t0));
    t0 = metrics::Clock::now();
    const at::Tensor back = compress::decode(packet);
    c.decode_s = std::min(c.decode_s, metrics::since(t0));
    c.bytes = static_cast<double>(packet.size());
  }
  return c;
}

}  // namespace dtrain::parallel
