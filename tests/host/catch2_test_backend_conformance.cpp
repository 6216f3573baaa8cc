// SPDX-License-Identifier: Apache-2.0
// The backend conformance suite (backend_conformance.hpp) on ref::host_backend: a fresh host
// backend against the oracle. This keeps the suite compiling and running in CI without a GPU,
// and checks what the oracle promises of itself: every operation is deterministic and depends
// on nothing a fresh backend does not have (pool contents, earlier calls).
#include "../nn/backend_conformance.hpp"
#include "../nn/backend_conformance_loss.hpp"

MXKIT_BACKEND_CONFORMANCE_TESTS(backend_conformance::host_subject, "host backend conformance", "[nn][backend][conformance]")
MXKIT_BACKEND_LOSS_CONFORMANCE_TESTS(backend_conformance::host_subject, "host backend conformance", "[nn][backend][conformance]")
