// One control message body (MessagePack), as it arrives in a control frame from either side.
// decode() reads well-formed bodies directly and falls back to the reference decoder otherwise;
// both must agree on every body: the same message, or the same one-line error. A decoded message
// encodes again and decodes to itself.
#include "fuzz_support.hpp"
#include "link/messages.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace pm::fuzz;
  namespace link = pm::link;
  const std::span<const std::uint8_t> body(data, size);
  std::optional<link::envelope> fast, reference;
  std::string fast_error, reference_error;
  try {
    fast = link::decode(body);
  } catch (const pm::error& e) {
    check_one_line(e);
    fast_error = e.what();
  }
  try {
    reference = link::decode_reference(body);
  } catch (const pm::error& e) {
    check_one_line(e);
    reference_error = e.what();
  }
  check(fast.has_value() == reference.has_value(), "decode and decode_reference disagree");
  if (!fast) {
    check(fast_error == reference_error, "decode and decode_reference fail differently");
    return 0;
  }
  check(*fast == *reference, "decode and decode_reference read different messages");
  const auto again = link::encode(fast->msg, fast->fds);
  check(link::decode(again) == *fast, "a decoded message does not survive encode and decode");
  check(link::decode_reference(again) == *fast, "an encoded message reads differently");
  return 0;
}
