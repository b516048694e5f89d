// The visitor of several lambdas for std::visit: overloaded{[](a&) {...}, [](b&) {...}}.
#pragma once

namespace pm {

template <class... F>
struct overloaded : F... {
  using F::operator()...;
};
// Clang 14 does not deduce aggregate template arguments yet (the asan build uses it).
template <class... F>
overloaded(F...) -> overloaded<F...>;

}  // namespace pm
