// The one mapping from ucs_status_t to pact::Status.
#pragma once

#include <ucs/type/status.h>

#include "common/status.h"

namespace pact::ucx {

Status toStatus(ucs_status_t s);
// "ucx <what> failed: <ucs_status_string>" as an Error with the mapped status.
Error error(const char* what, ucs_status_t s);

}  // namespace pact::ucx
