// Every key of the rows dtrain writes (training, `dtrain scale`, every bench), spelled once.
// The writers, the HTML report (src/dtrain/report) and `dtrain scale` read and write rows
// through these names; bench/metrics_keys.py parses this file, so the Python table scripts
// fail loudly on a key that is not defined here.
// Format (read by bench/metrics_keys.py): one `inline constexpr char kName[] = "key";` a line.
#pragma once

namespace dtrain::metrics::key {

// One row per epoch.
inline constexpr char kEpoch[] = "epoch";
inline constexpr char kTrainLoss[] = "train_loss";
inline constexpr char kTrainAcc[] = "train_acc";
inline constexpr char kTestLoss[] = "test_loss";
inline constexpr char kTestAcc[] = "test_acc";
inline constexpr char kTestMcc[] = "test_mcc";  // Matthews correlation: CoLA-like tasks only
inline constexpr char kSamplesPerS[] = "samples_per_s";
inline constexpr char kEpochS[] = "epoch_s";
inline constexpr char kLr[] = "lr";
inline constexpr char kTimeDataS[] = "time_data_s";
inline constexpr char kTimeForwardS[] = "time_forward_s";
inline constexpr char kTimeBackwardS[] = "time_backward_s";
inline constexpr char kTimeOptimizerS[] = "time_optimizer_s";
inline constexpr char kTimeCommS[] = "time_comm_s";
inline constexpr char kPeakRssBytes[] = "peak_rss_bytes";
inline constexpr char kSteps[] = "steps";                                     // optimizer steps
inline constexpr char kCudaMaxAllocatedBytes[] = "cuda_max_allocated_bytes";  // GPU runs only
inline constexpr char kCudaMaxReservedBytes[] = "cuda_max_reserved_bytes";

// DDP's epoch extras.
inline constexpr char kCommTotalS[] = "comm_total_s";
inline constexpr char kCommExposedS[] = "comm_exposed_s";
inline constexpr char kCommHiddenFraction[] = "comm_hidden_fraction";
inline constexpr char kGradBytes[] = "grad_bytes";
inline constexpr char kGradWireBytes[] = "grad_wire_bytes";
inline constexpr char kBuckets[] = "buckets";
inline constexpr char kArmedBuckets[] = "armed_buckets";  // receives posted at backward's start
inline constexpr char kPeakRssMaxBytes[] = "peak_rss_max_bytes";
inline constexpr char kCudaMaxAllocatedMaxBytes[] = "cuda_max_allocated_max_bytes";  // GPU runs
inline constexpr char kCudaMaxReservedMaxBytes[] = "cuda_max_reserved_max_bytes";

// DiLoCo's epoch extras (parallel/diloco.h): outer steps (fragment exchanges), the time
// training waited for them, the time the exchanges took and the part of it hidden behind
// inner steps, the bytes this rank sent in them and what exact fp32 all-reduces would have
// sent, bytes sent per training sample (all replicas' samples), compute time over the
// epoch's wall time.
inline constexpr char kOuterSteps[] = "outer_steps";
inline constexpr char kOuterCodec[] = "outer_codec";  // --compress-outer's, or auto's choice
inline constexpr char kOuterSyncS[] = "outer_sync_s";
inline constexpr char kOuterExchangeS[] = "outer_exchange_s";
inline constexpr char kOuterHiddenS[] = "outer_hidden_s";
inline constexpr char kOuterWireBytes[] = "outer_wire_bytes";
inline constexpr char kOuterFp32Bytes[] = "outer_fp32_bytes";
inline constexpr char kWireBytesPerSample[] = "wire_bytes_per_sample";
inline constexpr char kComputeUtilization[] = "compute_utilization";

// Elastic DiLoCo's epoch extras (docs/elastic.md): the replicas at the epoch's end, the views
// its rounds trained in, outer steps whose exchange was redone among survivors, the samples
// of contributions that counted and their rate, the samples trained in contributions that did
// not count (lost with their replica: trained again later), and the membership events.
inline constexpr char kElasticMembers[] = "elastic_members";
inline constexpr char kElasticViews[] = "elastic_views";
inline constexpr char kElasticRedone[] = "elastic_redone";
inline constexpr char kCommittedSamples[] = "committed_samples";
inline constexpr char kCommittedSamplesPerS[] = "committed_samples_per_s";
inline constexpr char kLostSamples[] = "lost_samples";
inline constexpr char kElasticEvents[] = "elastic_events";

// The pipeline's epoch extras, and its per-rank (stages) and per-link (links) rows.
inline constexpr char kCompressionRatio[] = "compression_ratio";
inline constexpr char kBubbleMeasured[] = "bubble_measured";
inline constexpr char kBubbleIdeal[] = "bubble_ideal";
inline constexpr char kStages[] = "stages";
inline constexpr char kLinks[] = "links";
inline constexpr char kRank[] = "rank";
inline constexpr char kBlocks[] = "blocks";
inline constexpr char kForwardS[] = "forward_s";
inline constexpr char kBackwardS[] = "backward_s";
inline constexpr char kEncodeS[] = "encode_s";
inline constexpr char kDecodeS[] = "decode_s";
inline constexpr char kRecvWaitS[] = "recv_wait_s";
inline constexpr char kSendWaitS[] = "send_wait_s";
inline constexpr char kWireCheckS[] = "wire_check_s";  // CRC32C and framing of messages
inline constexpr char kIdleS[] = "idle_s";
inline constexpr char kStepS[] = "step_s";
inline constexpr char kBubble[] = "bubble";
inline constexpr char kSrc[] = "src";
inline constexpr char kDst[] = "dst";
inline constexpr char kDirection[] = "direction";
inline constexpr char kBytes[] = "bytes";
inline constexpr char kMessages[] = "messages";
inline constexpr char kRecvTimeS[] = "recv_time_s";
inline constexpr char kBandwidthGbps[] = "bandwidth_gbps";
inline constexpr char kWireCheck[] = "wire_check";  // bench p2p: "on" or "off"
// --measure-wire-check (metrics/alternating_cost.h): steps with the check off and on.
inline constexpr char kWireCheckPairs[] = "wire_check_pairs";
inline constexpr char kStepSCheckOff[] = "step_s_check_off";
inline constexpr char kStepSCheckOn[] = "step_s_check_on";
inline constexpr char kWireCheckCost[] = "wire_check_cost";           // (on - off) / off
inline constexpr char kWireCheckCostCi95[] = "wire_check_cost_ci95";  // its 95 % half-width
inline constexpr char kLatencyUs[] = "latency_us";                    // bench p2p
inline constexpr char kRatio[] = "ratio";
// --compress auto: one row per tuned link.
inline constexpr char kAutoLinks[] = "auto_links";
inline constexpr char kCodec[] = "codec";
inline constexpr char kRateMbps[] = "rate_mbps";
// How rate_mbps was measured: "probe" (comm/link_probe.h) or "step" (the last step's exchange).
inline constexpr char kRateFrom[] = "rate_from";
inline constexpr char kPredictedStepS[] = "predicted_step_s";
inline constexpr char kPredictedBy[] = "predicted_step_s_by_codec";
// Its runoff (parallel/auto_runoff.h): pairs of steps counted, mean step per codec run off.
inline constexpr char kRunoffPairs[] = "runoff_pairs";
inline constexpr char kMeasuredBy[] = "measured_step_s_by_codec";

// The step log (--step-log, and the run's report): a row every --log-every batches of rank
// 0's own batches, beside the epochs' train_loss, train_acc and samples_per_s, which there
// are since the previous row.
inline constexpr char kStep[] = "step";                     // batches since the run's start
inline constexpr char kElapsedS[] = "elapsed_s";            // seconds since the run's start
inline constexpr char kEpochProgress[] = "epoch_progress";  // epoch + fraction of it done

// A pipeline step drawn per rank in a run's report (report/pipeline_timeline.h): its spans
// (rank, kind, begin_ms, end_ms, label) and which training step it is.
inline constexpr char kTimeline[] = "timeline";
inline constexpr char kTimelineStep[] = "timeline_step";
inline constexpr char kKind[] = "kind";
inline constexpr char kBeginMs[] = "begin_ms";
inline constexpr char kEndMs[] = "end_ms";
inline constexpr char kLabel[] = "label";

// The summary row closing a run's JSON lines.
inline constexpr char kSummary[] = "summary";
inline constexpr char kModel[] = "model";
inline constexpr char kDataset[] = "dataset";
inline constexpr char kEpochs[] = "epochs";
inline constexpr char kParameters[] = "parameters";
inline constexpr char kParallel[] = "parallel";
inline constexpr char kRanks[] = "ranks";
inline constexpr char kBatchSize[] = "batch_size";
inline constexpr char kGradAccumSteps[] = "grad_accum_steps";
inline constexpr char kFinalTestAcc[] = "final_test_acc";
inline constexpr char kFinalTestLoss[] = "final_test_loss";
inline constexpr char kFinalTestMcc[] = "final_test_mcc";
inline constexpr char kTotalS[] = "total_s";
inline constexpr char kThreads[] = "threads";
// The bench rows (bench collective, p2p, codec, syncbn): what was measured, and on what.
inline constexpr char kBench[] = "bench";  // "collective", "p2p", "codec", "checksum"
inline constexpr char kOp[] = "op";
inline constexpr char kAlgo[] = "algo";
inline constexpr char kReduce[] = "reduce";
inline constexpr char kWorld[] = "world";
inline constexpr char kCount[] = "count";
inline constexpr char kDtype[] = "dtype";
inline constexpr char kDevice[] = "device";
inline constexpr char kTimeUs[] = "time_us";
// bench collective: the median call, each call's time the slowest rank's
inline constexpr char kMedianUs[] = "median_us";
inline constexpr char kAlgbwGbps[] = "algbw_gbps";
inline constexpr char kBusbwGbps[] = "busbw_gbps";
inline constexpr char kWrong[] = "wrong";  // elements (collective) or bytes (p2p) off
inline constexpr char kMaxAbsDiff[] = "max_abs_diff";
inline constexpr char kChosen[] = "chosen";    // auto: the algorithm its measurements chose
inline constexpr char kStreams[] = "streams";  // connections a link stripes large messages over
inline constexpr char kOpenings[] =
    "openings";  // bench collective: "on" or "off" (Group::isend_opening)
inline constexpr char kRttMs[] = "rtt_ms";  // a link's round trip (the longest of the group's)
inline constexpr char kPath[] = "path";     // bench p2p: "gloo", "gloo staged", "nccl"
inline constexpr char kWindow[] = "window";
inline constexpr char kIters[] = "iters";
inline constexpr char kDist[] = "dist";
inline constexpr char kNumel[] = "numel";
inline constexpr char kMseOverVar[] = "mse_over_var";
inline constexpr char kMaxAbsErr[] = "max_abs_err";
inline constexpr char kEncodeGbps[] = "encode_gbps";
inline constexpr char kDecodeGbps[] = "decode_gbps";
inline constexpr char kEncodeMs[] = "encode_ms";
inline constexpr char kDecodeMs[] = "decode_ms";
inline constexpr char kReps[] = "reps";
inline constexpr char kLloydMaxBound[] = "lloyd_max_bound";
inline constexpr char kImpl[] = "impl";  // bench syncbn: "syncbn" or "local"
inline constexpr char kHidden[] = "hidden";
inline constexpr char kMedianS[] = "median_s";
inline constexpr char kPeakAllocBytes[] = "peak_alloc_bytes";
inline constexpr char kAllreduceBytes[] = "allreduce_bytes";

// `dtrain scale`: one row per (ranks, batch per rank).
inline constexpr char kBatchPerRank[] = "batch_per_rank";
inline constexpr char kGlobalBatch[] = "global_batch";
inline constexpr char kStatus[] = "status";
inline constexpr char kSpeedupEpoch[] = "speedup_epoch";
inline constexpr char kSpeedupWeak[] = "speedup_weak";
inline constexpr char kSpeedupStrong[] = "speedup_strong";
inline constexpr char kCommInferredS[] = "comm_inferred_s";
inline constexpr char kComputeS[] = "compute_s";

// Every row dtrain writes as JSON lines: the command line that produced it.
inline constexpr char kCommand[] = "command";

}  // namespace dtrain::metrics::key
