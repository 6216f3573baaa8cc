// SPDX-License-Identifier: Apache-2.0
#pragma once
// Umbrella header of the training stack: recipes, layers, model, optimizer, checkpoints, healing,
// data, and the host reference backend with its layer kernels. Includes <mxkit/mxkit.hpp>.
// Written by scripts/update_umbrella.sh, checked by ctest static.headers.
#include <mxkit/mxkit.hpp>
#include <mxkit/nn/adamw.hpp>
#include <mxkit/nn/attention.hpp>
#include <mxkit/nn/backend.hpp>
#include <mxkit/nn/backend_observer.hpp>
#include <mxkit/nn/checkpoint.hpp>
#include <mxkit/nn/communicator.hpp>
#include <mxkit/nn/data.hpp>
#include <mxkit/nn/data_parallel.hpp>
#include <mxkit/nn/delayed_scaling.hpp>
#include <mxkit/nn/embedding.hpp>
#include <mxkit/nn/file_io.hpp>
#include <mxkit/nn/healing.hpp>
#include <mxkit/nn/kernel_args.hpp>
#include <mxkit/nn/linear.hpp>
#include <mxkit/nn/lora.hpp>
#include <mxkit/nn/lora_base.hpp>
#include <mxkit/nn/model.hpp>
#include <mxkit/nn/operand.hpp>
#include <mxkit/nn/parameter.hpp>
#include <mxkit/nn/recipe.hpp>
#include <mxkit/nn/rendezvous.hpp>
#include <mxkit/nn/rmsnorm.hpp>
#include <mxkit/nn/rope.hpp>
#include <mxkit/nn/safetensors.hpp>
#include <mxkit/nn/schedule.hpp>
#include <mxkit/nn/sharded_checkpoint.hpp>
#include <mxkit/nn/swiglu.hpp>
#include <mxkit/nn/tensor.hpp>
#include <mxkit/nn/training.hpp>
#include <mxkit/nn/transformer_layer.hpp>
#include <mxkit/ref/host_backend.hpp>
#include <mxkit/ref/nn/adamw.hpp>
#include <mxkit/ref/nn/attention.hpp>
#include <mxkit/ref/nn/cross_entropy.hpp>
#include <mxkit/ref/nn/delayed_scaling.hpp>
#include <mxkit/ref/nn/embedding.hpp>
#include <mxkit/ref/nn/quantized_gather.hpp>
#include <mxkit/ref/nn/rmsnorm.hpp>
#include <mxkit/ref/nn/rope.hpp>
#include <mxkit/ref/nn/swiglu.hpp>
#include <mxkit/ref/nn/thread_communicator.hpp>
