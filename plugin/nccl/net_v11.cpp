// ncclNetPlugin_v11 (NCCL 2.28+): per-communicator init/finalize with a context, traffic class
// in init's config, maxMultiRequestSize in the properties.
#include "abi/net_v11.h"
#include "plugin/nccl/adapters.h"

namespace pact::plugin {
namespace {

ncclResult_t getProperties(int dev, ncclNetProperties_v11_t* props) {
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
    return r;
  });
}

}  // namespace
}  // namespace pact::plugin

using namespace pact::plugin;

extern "C" __attribute__((visibility("default"))) const ncclNet_v11_t ncclNetPlugin_v11 = {
    .name = "PACT",
    .init = initCtx<ncclNetCommConfig_v11_t>,
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
    .makeVDevice = makeVDeviceV<ncclNetVDeviceProps_v11_t>,
    .finalize = finalize,
    .setNetAttr = nullptr,
};
