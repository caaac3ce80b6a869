#include "ucx/ucx_status.h"

#include <string>

namespace pact::ucx {

Status toStatus(ucs_status_t s) {
  switch (s) {
    case UCS_OK: return Status::kOk;
    case UCS_INPROGRESS: return Status::kInProgress;
    case UCS_ERR_NO_MEMORY: return Status::kNoMemory;
    case UCS_ERR_INVALID_PARAM: return Status::kInvalidArgument;
    case UCS_ERR_NO_RESOURCE: return Status::kNoResource;
    case UCS_ERR_MESSAGE_TRUNCATED: return Status::kTruncated;
    case UCS_ERR_CANCELED: return Status::kCanceled;
    case UCS_ERR_TIMED_OUT: return Status::kTimeout;
    case UCS_ERR_UNSUPPORTED: return Status::kUnsupported;
    case UCS_ERR_UNREACHABLE:
    case UCS_ERR_NOT_CONNECTED:
    case UCS_ERR_CONNECTION_RESET:
    case UCS_ERR_ENDPOINT_TIMEOUT:
    case UCS_ERR_REJECTED: return Status::kRemoteError;
    case UCS_ERR_IO_ERROR: return Status::kRemoteError;  // transport I/O failure: the peer side
    default: return Status::kInternal;  // ucs_status_t is a growing foreign set
  }
}

Error error(const char* what, ucs_status_t s) {
  return Error{toStatus(s), std::string("ucx ") + what + " failed: " + ucs_status_string(s)};
}

}  // namespace pact::ucx
