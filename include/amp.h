/* amp: automatic mixed precision training in C. The umbrella header: include this one. */
#ifndef AMP_H
#define AMP_H

#include "amp/version.h"
#include "amp/status.h"
#include "amp/log.h"
#include "amp/alloc.h"
#include "amp/dtype.h"
#include "amp/formats.h"
#include "amp/fp8.h"
#include "amp/cpu.h"
#include "amp/threads.h"
#include "amp/gemm.h"
#include "amp/tensor.h"
#include "amp/ops.h"
#include "amp/autocast.h"
#include "amp/recompute.h"
#include "amp/optim.h"
#include "amp/scaler.h"
#include "amp/precision.h"
#include "amp/init.h"
#include "amp/layers.h"
#include "amp/nn.h"
#include "amp/data.h"
#include "amp/checkpoint.h"
#include "amp/llmc.h"
#include "amp/comm.h"
#include "amp/train.h"
#include "amp/tokenizer.h"
#include "amp/generate.h"
#include "amp/vocab.h"

#endif /* AMP_H */
