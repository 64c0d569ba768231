// Kiln's quantization in one include: observers, fake quantization, the
// prepare / calibrate / convert and QAT workflows, fusion, the quantized
// modules and 8-bit Adam (docs/QUANTIZATION.md, quant/).
//
//   #include <kiln.h>
//   #include <kiln/quant.h>
#pragma once

#include "kiln.h"

#include "quant/adam8bit.h"
#include "quant/fake_quant_modules.h"
#include "quant/fake_quantize.h"
#include "quant/fuse.h"
#include "quant/observer.h"
#include "quant/qconfig.h"
#include "quant/quantize.h"
#include "quant/quantized_modules.h"
#include "quant/stubs.h"
