#include "dtrain/comm/tags.h"

#include <cstdio>
#include <stdexcept>

namespace dtrain::comm {
namespace {

constexpr int kFieldBits = 24;
// Openings' tags: the top two bits of a collective tag's 16-bit phase field, bits that
// DiLoCo's outer layout (a 2-bit phase) and elastic DiLoCo's (8 bits) leave free too.
constexpr int kOpeningPayloadBit = 1 << 15, kOpeningTrailerBit = 1 << 14;

bool opens(int space) {
  return space == static_cast<int>(TagSpace::kCollective) ||
         space == static_cast<int>(TagSpace::kOuter) ||
         space == static_cast<int>(TagSpace::kElastic);
}

}  // namespace

TagLayout::TagLayout(TagSpace space, std::initializer_list<TagField> fields)
    : space_(space), fields_(fields) {
  int bits = 0;
  for (const TagField& f : fields_) {
    if (f.bits < 1) throw std::invalid_argument(std::string("tag field ") + f.name + ": no bits");
    bits += f.bits;
  }
  if (bits > kFieldBits) {
    throw std::invalid_argument("tag layout needs " + std::to_string(bits) + " bits, more than " +
                                std::to_string(kFieldBits));
  }
}

int64_t TagLayout::limit(size_t index) const {
  return int64_t{1} << fields_.at(index).bits;
}

int TagLayout::make(std::initializer_list<int64_t> values) const {
  if (values.size() != fields_.size()) {
    throw std::invalid_argument("tag needs " + std::to_string(fields_.size()) + " values, got " +
                                std::to_string(values.size()));
  }
  int64_t packed = 0;
  size_t i = 0;
  for (const int64_t v : values) {
    const TagField& f = fields_[i];
    if (v < 0 || v >= limit(i)) {
      throw std::out_of_range(std::string("message tag field '") + f.name + "' = " +
                              std::to_string(v) + " is outside 0.." + std::to_string(limit(i) - 1));
    }
    packed = (packed << f.bits) | v;
    ++i;
  }
  return static_cast<int>((static_cast<int64_t>(space_) << kFieldBits) | packed);
}

int collective_tag(CollectiveChannel channel) {
  // The phase field stays 0 here: an algorithm's second phase adds 1 (tags.h).
  static const TagLayout layout(TagSpace::kCollective, {{"collective", 8}, {"phase", 16}});
  return layout.make({static_cast<int64_t>(channel), 0});
}

bool has_opening_tags(int tag) {
  return opens(tag >> kFieldBits) && (tag & (kOpeningPayloadBit | kOpeningTrailerBit)) == 0;
}

OpeningTags opening_tags(int tag) {
  if (!has_opening_tags(tag))
    throw std::invalid_argument(
        "openings are for collective, DiLoCo and elastic tags with a phase below 2^14, not " +
        describe_tag(tag));
  return {tag | kOpeningPayloadBit, tag | kOpeningTrailerBit};
}

namespace {
const TagLayout& report_layout() {
  static const TagLayout layout(TagSpace::kReport, {{"report", 8}});
  return layout;
}
}  // namespace

int report_tag() {
  return report_layout().make({0});
}

int trace_tag() {
  return report_layout().make({1});
}

int connect_probe_tag() {
  return report_layout().make({2});
}

std::string describe_tag(int tag) {
  static const char* const kSpaceNames[] = {"unregistered", "collective",   "pipeline",
                                            "DDP",          "report",       "benchmark",
                                            "tuning",       "DiLoCo outer", "elastic"};
  const int space = tag >> kFieldBits;
  const int known = static_cast<int>(sizeof(kSpaceNames) / sizeof(kSpaceNames[0]));
  char hex[16];
  std::snprintf(hex, sizeof(hex), "%x", static_cast<unsigned>(tag));
  return std::string(space > 0 && space < known ? kSpaceNames[space] : kSpaceNames[0]) +
         " message (tag 0x" + hex + ")";
}

}  // namespace dtrain::comm
