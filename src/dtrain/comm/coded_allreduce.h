// All-reduce (mean) of a flat float tensor whose messages are coded bytes instead of raw
// values, for lossy gradient compression: a direct reduce-scatter (rank j owns piece j;
// every rank sends its piece j, coded, to j, which decodes and averages), then a direct
// all-gather of each owner's average, coded once. The owner keeps the decoded value of
// what it sent, so every rank ends with identical values.
//
// comm knows no codecs: the caller supplies the coding (a codec with error feedback, say),
// one encoder per (phase, peer) so each can keep its own state.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <vector>

namespace dtrain::comm {

class Group;

enum class CodedPhase { kScatter = 0, kGather = 1 };

struct PieceCoding {
  // Bytes for `piece` going to `peer` in `phase` (kGather: one encoding sent to every peer,
  // peer == this rank); fills `decoded` with what receivers will decode.
  std::function<std::vector<uint8_t>(CodedPhase phase, int peer, const at::Tensor& piece,
                                     at::Tensor& decoded)>
      encode;
  // The values in `bytes`; throws on corrupt bytes.
  std::function<at::Tensor(const std::vector<uint8_t>& bytes)> decode;
  // Optional: the bytes encode() returns for a piece of `values` values, where a codec's
  // packet size follows from its length. Given it, every piece travels as one message of a
  // size both ends know, its receive posted before any send; without it, as a byte message
  // (a length, then the payload: Group::exchange_bytes).
  std::function<int64_t(int64_t values)> packet_bytes;
};

// Averages `flat` (1-D) over the group in place; returns the bytes this rank sent. A piece
// of the wrong length from a peer is an error naming it (the ranks' tensors differ).
int64_t coded_all_reduce_mean(Group& group, at::Tensor& flat, const PieceCoding& coding,
                              int scatter_tag, int gather_tag);

// The same mean in one message each way: every rank codes its whole `flat` once (as the
// gather phase: encode(kGather, this rank, ...)) and sends it to every other; each decodes
// them all and averages in rank order, its own as the others decode it, so every rank ends
// with identical values. With 2 ranks it sends the scatter-gather's bytes in half its
// one-way delays (and codes each value once, not twice); with p ranks (p - 1) / 2 times
// as many bytes as the scatter-gather's.
int64_t coded_all_gather_mean(Group& group, at::Tensor& flat, const PieceCoding& coding, int tag);

}  // namespace dtrain::comm
