// Internal: the codec table. A codec family is one row (a CodecFamily) defined in the
// family's own file beside its Codec class (CPU kernels and tensor-operation kernels), and
// listed once in codec_table.cpp. A family's wire id is its row's place in the table, so
// rows are only ever appended, and the last id is the table's size minus one.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "dtrain/compress/codec.h"

namespace dtrain::compress {

struct CodecFamily {
  const char* name;     // "uniform": what a codec name holds before its first ':'
  const char* usage;    // "uniform:B", the left column of --help
  const char* help;     // one line of --help
  const char* example;  // a valid name ("uniform:8"): the table's tests code with it
  // The ':'-separated parameters after the name into a spec (its id is the table's to
  // set). Throws std::invalid_argument saying what is wrong; the caller names the codec.
  CodecSpec (*parse)(const std::vector<std::string>& parameters);
  // Throws std::invalid_argument saying why the family cannot take spec's parameters.
  void (*check)(const CodecSpec& spec);
  // The canonical parameters (":6:2"), which parse reads back.
  std::string (*parameters)(const CodecSpec& spec);
  std::unique_ptr<Codec> (*make)(const CodecSpec& spec);
  // Whether its specs name an inner codec and a tile (rot); the others must leave both 0.
  bool wraps_a_codec = false;
};

// The rows in wire-id order (codec_table.cpp).
const std::vector<const CodecFamily*>& codec_families();

// The row of a wire id, or nullptr when no family has it.
const CodecFamily* find_codec_family(CodecId id);

// For the families' parse functions: an integer parameter (std::invalid_argument
// "'x' is not an integer"), and the count of parameters (lo..hi).
int integer_parameter(const std::string& text);
void require_parameter_count(const std::vector<std::string>& parameters, size_t lo, size_t hi);

// The parse and parameters of a family whose one parameter is its width ("uniform:B").
CodecSpec parse_bits_parameter(const std::vector<std::string>& parameters);
std::string bits_parameter(const CodecSpec& spec);

}  // namespace dtrain::compress
