// Every word the agent link's control messages use on the wire, taken from the wire forms: the
// message types, every key of every message and of the structs inside them, and every name an
// enum travels as. The fuzz targets' dictionary is written from it (tests/fuzz/make_link_seeds),
// and a test checks the dictionary against it.
#pragma once

#include <string>
#include <vector>

namespace pm::link::codec {

/// Sorted, each word once.
std::vector<std::string> wire_vocabulary();

}  // namespace pm::link::codec
