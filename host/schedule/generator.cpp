#include "schedule/generator.h"

namespace cellm {

Generator::Generator(Engine& engine, const Tokenizer& tokenizer) : engine_(engine), tokenizer_(tokenizer) {}

Generator::~Generator() = default;

GenerationResult Generator::generate(const GenerationRequest& request,
                                     const std::function<void(std::string_view)>& on_text) {
    if (!scheduler_ || request.prefill_chunk != prefill_chunk_) {
        SchedulerOptions options;
        options.token_budget = request.prefill_chunk;
        options.max_running = 1;
        scheduler_ = std::make_unique<Scheduler>(engine_, tokenizer_, options);
        prefill_chunk_ = request.prefill_chunk;
        session_ = scheduler_->create({});
    }
    SessionOptions options;
    options.sampling = request.sampling;
    options.max_tokens = request.max_tokens;
    options.stop = request.stop;
    options.on_text = on_text;
    scheduler_->reconfigure(session_, std::move(options));
    scheduler_->submit(session_, request.prompt);
    scheduler_->run();
    return scheduler_->session(session_).result();
}

std::vector<int32_t> Generator::cached() const {
    if (!scheduler_) return {};
    const std::span<const int32_t> held = scheduler_->cached_tokens(session_);
    return {held.begin(), held.end()};
}

}  // namespace cellm
