// Kiln's data pipeline in one include: datasets, collate functions, samplers,
// loaders, transforms, the image and text readers and the tokenizers
// (docs/ARCHITECTURE.md, data/). With kiln.h it needs no folder path:
//
//   #include <kiln.h>
//   #include <kiln/data.h>
#pragma once

#include "kiln.h"

#include "data/cifar10.h"
#include "data/collate.h"
#include "data/dataloader.h"
#include "data/dataset.h"
#include "data/image.h"
#include "data/image_folder.h"
#include "data/sampler.h"
#include "data/text_dataset.h"
#include "data/text_file.h"
#include "data/tokenizer.h"
#include "data/transforms.h"
#include "data/typed_dataloader.h"
#include "data/typed_dataset.h"
#include "data/vision_datasets.h"
