// Python's repr() of a float, for the texts the core shares with its Python twin (drop details,
// refusals): the same words whichever implementation wrote them.
#pragma once

#include <string>

namespace bevpool {

std::string py_repr(double value);

}  // namespace bevpool
