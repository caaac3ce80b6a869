// The one ucs_status_t -> Status mapping and the Status names.
#include <gtest/gtest.h>

#include <set>

#include "ucx/ucx_status.h"

namespace pact {
namespace {

TEST(UcxStatus, MapsEveryFamily) {
  EXPECT_EQ(ucx::toStatus(UCS_OK), Status::kOk);
  EXPECT_EQ(ucx::toStatus(UCS_INPROGRESS), Status::kInProgress);
  EXPECT_EQ(ucx::toStatus(UCS_ERR_NO_MEMORY), Status::kNoMemory);
  EXPECT_EQ(ucx::toStatus(UCS_ERR_INVALID_PARAM), Status::kInvalidArgument);
  EXPECT_EQ(ucx::toStatus(UCS_ERR_NO_RESOURCE), Status::kNoResource);
  EXPECT_EQ(ucx::toStatus(UCS_ERR_MESSAGE_TRUNCATED), Status::kTruncated);
  EXPECT_EQ(ucx::toStatus(UCS_ERR_CANCELED), Status::kCanceled);
  EXPECT_EQ(ucx::toStatus(UCS_ERR_TIMED_OUT), Status::kTimeout);
  EXPECT_EQ(ucx::toStatus(UCS_ERR_UNSUPPORTED), Status::kUnsupported);
  for (auto s : {UCS_ERR_UNREACHABLE, UCS_ERR_NOT_CONNECTED, UCS_ERR_CONNECTION_RESET,
                 UCS_ERR_ENDPOINT_TIMEOUT, UCS_ERR_REJECTED, UCS_ERR_IO_ERROR})
    EXPECT_EQ(ucx::toStatus(s), Status::kRemoteError) << ucs_status_string(s);
  EXPECT_EQ(ucx::toStatus(UCS_ERR_IO_ERROR), Status::kRemoteError);
  EXPECT_EQ(ucx::toStatus(UCS_ERR_NO_ELEM), Status::kInternal);  // anything else
}

TEST(UcxStatus, ErrorNamesTheCallAndUcxText) {
  Error e = ucx::error("ep_create", UCS_ERR_UNREACHABLE);
  EXPECT_EQ(e.status, Status::kRemoteError);
  EXPECT_EQ(e.message, "ucx ep_create failed: Destination is unreachable");
}

TEST(Status, NamesAreDistinct) {
  std::set<std::string> names;
  for (int s = -11; s <= 1; ++s) names.insert(statusName(static_cast<Status>(s)));
  EXPECT_EQ(names.size(), 13u);
}

TEST(Result, CarriesValueOrError) {
  Result<int> a = 5;
  EXPECT_TRUE(a.ok());
  EXPECT_EQ(*a, 5);
  Result<int> b(Status::kTimeout, "late");
  EXPECT_FALSE(b.ok());
  EXPECT_EQ(b.status(), Status::kTimeout);
  EXPECT_EQ(b.error().message, "late");
}

}  // namespace
}  // namespace pact
