// ncclNetPlugin_v9 (NCCL 2.24+): size_t sizes, virtual-device properties.
#include "abi/net_v9.h"
#include "plugin/nccl/adapters.h"

namespace pact::plugin {
namespace {

ncclResult_t initV9(ncclDebugLogger_t logger) { return plugin::init(nullptr, -1, logger, false); }

ncclResult_t getProperties(int dev, ncclNetProperties_v9_t* props) {
  return guard("getProperties", [&] {
    net::Properties core;
    ncclResult_t r = fillCommon(dev, props, &core);
    if (r != ncclSuccess) return r;
    props->regIsGlobal = core.regIsGlobal;
    props->forceFlush = core.forceFlush;
    fillVProps(&props->vProps, core);
    props->maxP2pBytes = core.maxP2pBytes;
    props->maxCollBytes = core.maxCollBytes;
    return r;
  });
}

}  // namespace
}  // namespace pact::plugin

using namespace pact::plugin;

extern "C" __attribute__((visibility("default"))) const ncclNet_v9_t ncclNetPlugin_v9 = {
    .name = "PACT",
    .init = initV9,
    .devices = devices,
    .getProperties = pact::plugin::getProperties,
    .listen = listenNoClass,
    .connect = connectNoClass,
    .accept = accept,
    .regMr = regMr,
    .regMrDmaBuf = regMrDmaBuf,
    .deregMr = deregMr,
    .isend = isend,
    .irecv = irecv,
    .iflush = iflush,
    .test = test,
    .closeSend = closeSend,
    .closeRecv = closeRecv,
    .closeListen = closeListen,
    .getDeviceMr = nullptr,
    .irecvConsumed = nullptr,
    .makeVDevice = makeVDeviceV<ncclNetVDeviceProps_v9_t>,
};
