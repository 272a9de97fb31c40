#pragma once
// The handlers of the management methods (methods.h) over a running target.
#include <map>
#include <string>

#include "mgmt/rpc_server.h"

namespace sens::target {
class Target;
}

namespace sens::mgmt {

std::map<std::string, Handler> target_handlers(target::Target& t);

}  // namespace sens::mgmt
