// ncclNetPlugin_v12 (NCCL 2.30.3+): v11's calls; properties gain railId/planeId and virtual
// devices of up to 8 members.
#include "abi/net_v12.h"
#include "plugin/nccl/adapters.h"

namespace pact::plugin {
namespace {

ncclResult_t getProperties(int dev, ncclNetProperties_v12_t* props) {
  return guard("getProperties", [&] {
    net::Properties core;
    ncclResult_t r = fillCommon(dev, props, &core);
    if (r != ncclSuccess) return r;
    props->regIsGlobal = core.regIsGlobal;
    props->forceFlush = core.forceFlush;
    fillVProps(&props->vProps, core);
    props->maxP2pBytes = core.maxP2pBytes;
    props->maxCollBytes = core.maxCollBytes;
    props->maxMultiRequestSize = core.maxMultiRequestSize;
    props->railId = static_cast<int16_t>(core.railId);
    props->planeId = static_cast<int16_t>(core.planeId);
    return r;
  });
}

}  // namespace
}  // namespace pact::plugin

using namespace pact::plugin;

extern "C" __attribute__((visibility("default"))) const ncclNet_v12_t ncclNetPlugin_v12 = {
    .name = "PACT",
    .init = initCtx<ncclNetCommConfig_v12_t>,
    .devices = devices,
    .getProperties = pact::plugin::getProperties,
    .listen = listenCtx,
    .connect = connectCtx,
    .accept = accept,
    .regMr = regMr,
    .regMrDmaBuf = regMrDmaBuf,
    .deregMr = deregMr,
    .isend = isendP,
    .irecv = irecvP,
    .iflush = iflush,
    .test = test,
    .closeSend = closeSend,
    .closeRecv = closeRecv,
    .closeListen = closeListen,
    .getDeviceMr = nullptr,
    .irecvConsumed = nullptr,
    .makeVDevice = makeVDeviceV<ncclNetVDeviceProps_v12_t>,
    .finalize = finalize,
    .setNetAttr = nullptr,
};
