// SPDX-License-Identifier: Apache-2.0
#pragma once
// Umbrella header of the training stack: recipes, layers, model (nn/), the training loop, data and
// optimizer (train/), several ranks (parallel/), files (io/), and the host backend (host/) with its
// layer kernels (ref/nn/). Includes <mxkit/mxkit.hpp>.
// Written by scripts/update_umbrella.sh, checked by ctest static.headers.
#include <mxkit/mxkit.hpp>
#include <mxkit/host/host_backend.hpp>
#include <mxkit/host/host_staging.hpp>
#include <mxkit/io/checkpoint.hpp>
#include <mxkit/io/file_io.hpp>
#include <mxkit/io/hf_llama.hpp>
#include <mxkit/io/json_reader.hpp>
#include <mxkit/io/safetensors.hpp>
#include <mxkit/io/sharded_checkpoint.hpp>
#include <mxkit/nn/attention.hpp>
#include <mxkit/nn/backend.hpp>
#include <mxkit/nn/backend_checks.hpp>
#include <mxkit/nn/backend_observer.hpp>
#include <mxkit/nn/delayed_scaling.hpp>
#include <mxkit/nn/delayed_scaling_rule.hpp>
#include <mxkit/nn/embedding.hpp>
#include <mxkit/nn/healing.hpp>
#include <mxkit/nn/kernel_args.hpp>
#include <mxkit/nn/linear.hpp>
#include <mxkit/nn/lora.hpp>
#include <mxkit/nn/lora_base.hpp>
#include <mxkit/nn/model.hpp>
#include <mxkit/nn/operand.hpp>
#include <mxkit/nn/parameter.hpp>
#include <mxkit/nn/recipe.hpp>
#include <mxkit/nn/rmsnorm.hpp>
#include <mxkit/nn/rope.hpp>
#include <mxkit/nn/swiglu.hpp>
#include <mxkit/nn/tensor.hpp>
#include <mxkit/nn/transformer_layer.hpp>
#include <mxkit/parallel/communicator.hpp>
#include <mxkit/parallel/copy_gather.hpp>
#include <mxkit/parallel/data_parallel.hpp>
#include <mxkit/parallel/gathered_copies.hpp>
#include <mxkit/parallel/gradient_group.hpp>
#include <mxkit/parallel/parallel_config.hpp>
#include <mxkit/parallel/quantized_gather.hpp>
#include <mxkit/parallel/rendezvous.hpp>
#include <mxkit/parallel/thread_communicator.hpp>
#include <mxkit/ref/nn/adamw.hpp>
#include <mxkit/ref/nn/attention.hpp>
#include <mxkit/ref/nn/cross_entropy.hpp>
#include <mxkit/ref/nn/delayed_scaling.hpp>
#include <mxkit/ref/nn/embedding.hpp>
#include <mxkit/ref/nn/rmsnorm.hpp>
#include <mxkit/ref/nn/rope.hpp>
#include <mxkit/ref/nn/swiglu.hpp>
#include <mxkit/train/adamw.hpp>
#include <mxkit/train/data.hpp>
#include <mxkit/train/schedule.hpp>
#include <mxkit/train/training.hpp>
