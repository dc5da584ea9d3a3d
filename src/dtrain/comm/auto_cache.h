// `--algo auto`'s choices across runs: with DTRAIN_AUTO_CACHE=DIR, a run starts from the
// choices an earlier run on the same topology calibrated (allreduce_tuner.h) and writes
// back each new calibration, so a long link's calibration (about a second at 25 ms) is paid
// once, and runs on one topology take the same algorithms.
//
// The topology: the world size, every rank's host (its hostname and Gloo address, in rank
// order), the longest link's round trip in classes of a factor 2 (measured at connect),
// the connections per peer and the wire check. A file per topology,
// DIR/auto-<16 hex digits>.json, holds AllReduceTuner::export_choices(). Rank 0 reads it
// and sends its text to every rank, so all start from the same choices; a file that cannot
// be read or parsed is reported on stderr and ignored (the run calibrates). Rank 0 writes
// the file (a temporary file renamed over it) after each calibration. A link reshaped
// without changing its round-trip class is caught by the tuner's re-check, which
// calibrates again and rewrites the file.
//
// Contract: collective; call once per group, right after it is connected, before any
// all-reduce.
#pragma once

#include <string>

namespace dtrain::comm {

class Group;

// The directory DTRAIN_AUTO_CACHE names, or empty (no cache).
std::string auto_cache_dir();
// Loads the topology's choices into the group's tuner and arranges to save new ones, when
// `dir` is not empty. Returns the file's path (empty without a cache).
std::string share_auto_cache(Group& group, const std::string& dir);

}  // namespace dtrain::comm
