// What to quantize and how: the observers a layer's activations and weights
// get, as torch.ao.quantization's QConfig and QConfigMapping.
//
//   quant::QConfigMapping mapping;                       // default_qconfig() for every layer
//   mapping.set_module_name("fc3", std::nullopt);        // leave fc3 in float32
//   quant::prepare(*model, mapping);
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "quant/observer.h"

namespace kiln::quant {

// Makes a fresh observer for one tensor of one layer.
using ObserverFactory = std::function<std::shared_ptr<Observer>()>;

struct QConfig {
  ObserverFactory activation;  // per-tensor quint8 (the int8 kernels take quint8 activations)
  ObserverFactory weight;      // qint8, symmetric (zero point 0), per tensor or per channel (axis 0)
};

// Post-training static quantization: HistogramObserver (affine quint8,
// range minimising the L2 error) for activations, PerChannelMinMaxObserver
// (symmetric qint8) for weights. reduce_range: 7-bit activations ([0, 127],
// as torch's "x86" and "fbgemm" qconfigs), which CPUs without VNNI multiply
// at twice the rate (Note [Int8 GEMM on AVX2 without VNNI] in
// tensor/cpu/qgemm_kernels.h), for one bit of precision.
QConfig default_qconfig(bool reduce_range = false);
// QAT: MovingAverageMinMaxObserver activations, per-channel symmetric weights.
QConfig default_qat_qconfig(bool reduce_range = false);
// Dynamic quantization: only the weight observer is used.
QConfig default_dynamic_qconfig();

// A QConfig for each layer, by dotted name first, then the global one;
// std::nullopt leaves the layer (and everything below it) in float32.
class QConfigMapping {
 public:
  QConfigMapping() : global_(default_qconfig()) {}
  explicit QConfigMapping(std::optional<QConfig> global) : global_(std::move(global)) {}

  QConfigMapping& set_global(std::optional<QConfig> qconfig);
  QConfigMapping& set_module_name(const std::string& name, std::optional<QConfig> qconfig);

  // The qconfig of the layer at `name`: the longest prefix of it that was set
  // by name ("layer1" covers "layer1.0.conv1"), else the global one.
  const std::optional<QConfig>& for_module(const std::string& name) const;
  // Names set that matched no module (prepare reports them as an error).
  std::vector<std::string> names() const;

 private:
  std::optional<QConfig> global_;
  std::map<std::string, std::optional<QConfig>> by_name_;
};

// An observer's current params as a grid; throws naming `where` when the
// observer has recorded nothing ("convert without calibration").
QParams observer_qparams(const Observer& observer, const std::string& where);

// t's per-tensor grid when it carries QuantParams, else nullopt.
std::optional<QParams> grid_of(const Tensor& t);
// Puts the grid on t (a float tensor holding values on it, or a quantized one).
Tensor with_grid(Tensor t, const QParams& grid);

}  // namespace kiln::quant
