// ncclNetPlugin_v8 (NCCL 2.20+): int message sizes, init(logger), no makeVDevice.
#include "abi/net_v8.h"
#include "plugin/nccl/adapters.h"

namespace pact::plugin {
namespace {

ncclResult_t initV8(ncclDebugLogger_t logger) { return plugin::init(nullptr, -1, logger, false); }

ncclResult_t getProperties(int dev, ncclNetProperties_v8_t* props) {
  return guard("getProperties", [&] {
    net::Properties core;
    ncclResult_t r = fillCommon(dev, props, &core);
    if (r == ncclSuccess) props->regIsGlobal = core.regIsGlobal;
    return r;
  });
}

}  // namespace
}  // namespace pact::plugin

using namespace pact::plugin;

extern "C" __attribute__((visibility("default"))) const ncclNet_v8_t ncclNetPlugin_v8 = {
    .name = "PACT",
    .init = initV8,
    .devices = devices,
    .getProperties = pact::plugin::getProperties,
    .listen = listenNoClass,
    .connect = connectNoClass,
    .accept = accept,
    .regMr = regMr,
    .regMrDmaBuf = regMrDmaBuf,
    .deregMr = deregMr,
    .isend = isendInt,
    .irecv = irecvInt,
    .iflush = iflush,
    .test = test,
    .closeSend = closeSend,
    .closeRecv = closeRecv,
    .closeListen = closeListen,
    .getDeviceMr = nullptr,
    .irecvConsumed = nullptr,
};
