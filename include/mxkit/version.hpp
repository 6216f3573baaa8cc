// SPDX-License-Identifier: Apache-2.0
#pragma once
// Library version; the ABI namespace in config.hpp follows the major number.
#define MXKIT_VERSION_MAJOR 0
#define MXKIT_VERSION_MINOR 2
#define MXKIT_VERSION_PATCH 0
