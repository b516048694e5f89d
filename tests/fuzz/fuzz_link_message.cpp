// One control message body (MessagePack), as it arrives in a control frame from either side.
// decode() either reads a message or throws one line; it calls a body malformed exactly when
// nlohmann's reader (an independent one) does; a decoded message encodes again and decodes to
// itself.
#include "fuzz_support.hpp"
#include "link/messages.hpp"
#include "msgpack_oracle.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace pm::fuzz;
  namespace link = pm::link;
  const std::span<const std::uint8_t> body(data, size);
  std::optional<link::envelope> got;
  std::string error;
  try {
    got = link::decode(body);
  } catch (const pm::error& e) {
    check_one_line(e);
    error = e.what();
  }
  const bool refused_shape = error.rfind("agent link: malformed message body (", 0) == 0 ||
                             error == "agent link: message body nested deeper than 8 levels";
  check(refused_shape == !well_formed_msgpack(body, 8),
        "the link's reader and nlohmann's disagree on whether the body is MessagePack");
  if (!got) return 0;
  const auto again = link::encode(got->msg, got->fds);
  check(link::decode(again) == *got, "a decoded message does not survive encode and decode");
  check(link::encode(link::decode(again).msg, got->fds) == again,
        "a message encodes differently after a round trip");
  return 0;
}
