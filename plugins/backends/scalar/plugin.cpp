// The "scalar" backend: every node through the reference kernels, one thread. It is the yardstick the other
// backends are tested against, so it stays plain.
#include "frame.hpp"
#include "reference_kernels.hpp"

namespace cellm::scalar {
namespace {

class ReferenceExecutor final : public cpu::Executor {
public:
    void run(cpu::Plan& plan) override {
        for (size_t i = 0; i < plan.nodes.size(); ++i) cpu::run_reference(plan, static_cast<int32_t>(i));
    }
    int threads() const override { return 1; }
};

// The manifest's thread count and precision are accepted (manifests move between backends), but the reference
// runs on one thread, in its own order: exact is within every fast bound.
std::unique_ptr<cpu::Executor> make_executor(const cpu::ExecutorOptions&) { return std::make_unique<ReferenceExecutor>(); }

void describe(void (*emit)(void* user, const char* line), void* user) {
    if (emit != nullptr) emit(user, "cpu: portable scalar reference");
}

const cpu::BackendSpec spec = {
    "scalar",
    "0.1.0",
    "portable scalar reference backend (defines every op's numerics)",
    "cpu (scalar reference)",
    make_executor,
    describe,
};

}  // namespace
}  // namespace cellm::scalar

extern "C" CELLM_EXPORT const cellm_plugin_desc* cellm_plugin_entry(const cellm_host_api* host, uint32_t host_abi_major,
                                                                    uint32_t) {
    return cellm::cpu::plugin_descriptor(cellm::scalar::spec, host, host_abi_major);
}
