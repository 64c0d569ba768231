// kiln-lenet --quantize: a trained float model, quantized each way the
// issue asks (dynamic, static, QAT), measured the same way: test accuracy,
// model size and latency at batch 1 and 64. bench/quant_bench prints the same
// rows as machine-readable lines beside the anchors (bench/quant_vs_anchors.sh).
//
//   QuantizeReport r = quantization_report({.model = "lenet", .weights = "lenet.safetensors",
//                                          .data = "data", .modes = {"dynamic", "static", "qat"}}, std::cout);
//   std::cout << format_quantization_table(r);
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "quant/quantize.h"

namespace kiln::apps::lenet {

struct QuantizeReportOptions {
  std::string model = "lenet";         // lenet or resnet20
  std::string weights;                 // a state dict or kiln-lenet checkpoint (safetensors)
  std::string data = "data";           // as --data
  std::vector<std::string> modes;      // of dynamic, static, qat; float32 is always measured first
  int64_t calib_images = 512;          // training images for calibration (static, and QAT's start)
  int64_t test_images = 10000;         // test images for the accuracy
  double qat_epochs = 1;               // QAT fine-tuning, in passes over qat_images
  int64_t qat_images = 50000;          // training images per QAT epoch (at most the training set)
  double qat_lr = 1e-3;                // SGD, momentum 0.9
  bool reduce_range = false;           // static and QAT: 7-bit activations (quant::default_qconfig)
  uint64_t seed = 0;
  // Latency: untimed runs, then at least this many runs and this long, per batch size.
  int64_t warmup = 20;
  int64_t b1_runs = 200;
  int64_t b64_runs = 30;
  double min_seconds = 1.0;
  // After timing each quantized mode, run its forward at batch 1 or 64
  // (profile_batch) for this long more: a window for a profiler (perf
  // record) on that mode alone.
  double profile_seconds = 0;
  int64_t profile_batch = 64;
  // Also the per-layer sensitivity table (quant::sensitivity): the test
  // accuracy with only that layer quantized (static, calibrated).
  bool sensitivity = false;
};

struct QuantizeRow {
  std::string mode;      // float32, dynamic, static, qat
  double accuracy = 0;   // in %, over test_images
  int64_t bytes = 0;     // quant::model_size_bytes
  double b1_ms = 0;      // median latency of one image, 1 thread
  double b64_ms = 0;     // of a batch of 64
  std::string path;      // the kernel path: the int8 GEMM's (amx, avx512vnni, ...) or the float SIMD level
};

struct QuantizeReport {
  std::string model;
  std::vector<QuantizeRow> rows;
  std::vector<quant::SensitivityRow> sensitivity;  // with options.sensitivity, else empty
};

// Runs everything on one thread (set_num_threads(1)) and logs progress to `log`.
// Throws kiln::Error for an unknown mode or model, or weights that do not fit.
QuantizeReport quantization_report(const QuantizeReportOptions& options, std::ostream& log);

// The line quantization_report logs first where static or QAT int8 would
// run the slower of the AVX2 kernels: int8 path `path` (qgemm_path_name),
// 8-bit activations. "" otherwise.
std::string reduce_range_hint(const std::string& path, bool reduce_range, const std::vector<std::string>& modes);

// The table kiln-lenet prints: one row per mode, with accuracy drop and
// size and latency ratios against float32.
std::string format_quantization_table(const QuantizeReport& report);

// The sensitivity table: one row per layer, its accuracy and the drop
// against float32 (rows[0]), most sensitive first.
std::string format_sensitivity_table(const QuantizeReport& report);

// "quant model=lenet runtime=kiln mode=static acc=61.20 bytes=64648 b1_ms=0.031 b64_ms=0.512 path=amx"
std::string quant_line(const std::string& model, const QuantizeRow& row);

}  // namespace kiln::apps::lenet
