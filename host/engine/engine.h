// The engine runs steps: it gathers the tokens of one or more sequences into one batch, makes sure each
// sequence's page table covers the new positions, runs the step graph for that batch shape (prepared once
// and cached) and returns the requested logits rows. It also keeps the KV blocks' bookkeeping: full blocks
// are published by content so a new sequence can start from an identical cached prefix, and a block shared
// by several sequences is copied before one of them writes into it. A model with recurrent layers also gets a
// state slot per sequence (kv/state_pool.h), zeroed when the sequence starts and copied when it forks; such a
// state cannot be rewound, so these models reuse no cached prefix and truncating restarts the sequence.
#pragma once

#include "plugin/backend.h"
#include "kv/kv_cache.h"
#include "kv/state_pool.h"
#include "model/model.h"
#include "engine/step_graph.h"
#include "model/weights.h"

#include <limits>
#include <map>
#include <memory>
#include <span>
#include <tuple>
#include <vector>

namespace cellm {

struct EngineOptions {
    int32_t context_length = 2048; // positions per sequence
    int32_t block_size = 16;       // token slots per KV block
    int32_t max_sequences = 1;     // without a KV budget: sequences that must fit at full context at once
    uint64_t kv_memory = 0;        // KV pool size in bytes; 0: sized by max_sequences
    // Bytes for weights, scratch and KV pool together (0: none): the pool gets what the weights and the scratch
    // of a step of max_step_tokens leave, and the context shrinks to what the pool holds.
    uint64_t memory_budget = 0;
    int32_t max_step_tokens = 256;
    cellm_dtype kv_type = CELLM_TYPE_F16;
    bool prefix_cache = true;      // publish full blocks so identical prompt prefixes are reused
    // Give back the rows of sliding-window layers behind every holder's window (KvCache::release_window_rows).
    bool release_window = true;
};

// What the KV pool holds right now, and what its sharing has saved.
struct KvStats {
    int32_t blocks = 0, used = 0, free = 0;
    int32_t committed = 0;            // blocks with memory behind them (all, where the backend commits at once)
    int32_t window_released = 0;      // blocks whose sliding-window layers' rows went back
    uint64_t committed_bytes = 0;
    int32_t cached = 0;               // blocks findable by content (in use or free)
    int64_t prefix_hit_tokens = 0;    // prompt tokens taken from the cache instead of computed
    int64_t prefix_hit_blocks = 0;
    int64_t copied_blocks = 0;        // copy-on-write copies
};

// Where the engine's memory goes, measured at load.
struct MemorySplit {
    uint64_t weights = 0;  // what the backend reads weights from, mapped or uploaded
    uint64_t scratch = 0;  // what the backend says the largest step needs beside its buffers (0: it does not say)
    uint64_t kv_pool = 0;  // the KV pool at full use (committed as blocks come into use on the CPU backends)
};

enum class LogitsWanted { None, Last, All };

class Engine {
public:
    Engine(const Model& model, Backend& backend, const EngineOptions& options);
    ~Engine();

    // Throws cellm::Error when the model has recurrent layers and every state slot is taken.
    int32_t create_sequence();
    // Whether create_sequence would find a state slot (always, for a model without recurrent layers).
    bool can_create_sequence() const { return states_->empty() || states_->n_free() > 0; }
    void release_sequence(int32_t sequence);
    // A new sequence sharing every block of `sequence` (copy-on-write).
    int32_t fork_sequence(int32_t sequence);
    // Starts an empty `sequence` with the longest run of cached full blocks that `prompt` begins with,
    // leaving at least its last token to compute. Returns how many tokens it took.
    int32_t reuse_prefix(int32_t sequence, std::span<const int32_t> prompt);
    // KV blocks a step of `n_tokens` more tokens for `sequence` would take from the free list.
    int32_t blocks_needed(int32_t sequence, int32_t n_tokens) const;
    // Tokens whose keys and values `sequence` holds, in order.
    std::span<const int32_t> sequence_tokens(int32_t sequence) const;
    // Its page table: the KV blocks holding those tokens, in position order.
    std::span<const int32_t> sequence_blocks(int32_t sequence) const;
    // Positions already in the KV cache for `sequence`.
    int32_t sequence_length(int32_t sequence) const;
    // Positions whose keys and values depend on the tokens alone: before the first caller-supplied embedding.
    // Only these may be matched against a new prompt's tokens.
    int32_t token_determined_length(int32_t sequence) const;
    // Forgets positions >= n (they will be computed again), e.g. when a chat turn diverges from the cache.
    // Returns the positions kept: n, or 0 when a recurrent state would have to go back (the sequence restarts).
    int32_t truncate(int32_t sequence, int32_t n);

    // A token whose embedding the caller supplies (an image's, from VisionEncoder) instead of the model's.
    struct EmbeddedRow {
        int32_t index;        // into Work::tokens
        const float* values;  // n_embd floats, borrowed for the step
    };
    struct Work {
        int32_t sequence;
        std::span<const int32_t> tokens;
        LogitsWanted logits;
        std::span<const EmbeddedRow> embedded = {};  // ascending indices; only for a model with vision()
    };
    // Runs one step over all `work` items. Writes n_vocab floats per requested row into `logits`, in work
    // order (Last: one row, All: one per token). Throws cellm::Error and leaves sequences unchanged when
    // the step cannot run (but a backend that fails part way through has already advanced recurrent states).
    void step(std::span<const Work> work, std::vector<float>& logits);

    int32_t n_vocab() const { return model_->info().n_vocab; }
    int32_t context_length() const { return options_.context_length; }
    const KvCache& kv_cache() const { return *kv_; }
    const StatePool& state_pool() const { return *states_; }
    KvStats kv_stats() const;
    const WeightStore& weights() const { return *weights_; }
    const MemorySplit& memory() const { return memory_; }
    const Model& model() const { return *model_; }
    Backend& backend() const { return *backend_; }

private:
    struct Sequence {
        bool live = false;
        int32_t length = 0;
        PageTable pages;
        std::vector<int32_t> tokens;     // [0, length)
        std::vector<BlockHash> hashes;   // of the leading full blocks that are published
        // First position whose embedding came from the caller: blocks from there on are never published, since
        // their keys and values depend on more than the tokens (an image token's on its image).
        int32_t embedded_from = std::numeric_limits<int32_t>::max();
        int32_t state_slot = -1;         // in states_, for a model with recurrent layers
        // Blocks before this index are behind the sliding window for this sequence (and no longer counted in
        // in_window_); 0 for a model without one.
        int32_t window_first = 0;
    };
    Sequence& live_sequence(int32_t sequence);
    const Sequence& live_sequence(int32_t sequence) const;
    // Makes the page table cover `n_positions`, copying a shared last block first; false when out of blocks.
    bool reserve(Sequence& s, int32_t n_positions);
    void shrink(Sequence& s, int32_t n_positions);
    // Prepares the graphs of the largest step (max_step_tokens over a whole context) and of one decode token,
    // and returns the scratch the backend then says it needs.
    uint64_t step_scratch(int64_t blocks_per_sequence);
    // The KV pool's size under options_.memory_budget; shrinks the context when the pool holds less.
    int64_t blocks_within_budget(int64_t blocks_per_sequence, uint64_t block_bytes);
    // Returns KV memory that free blocks no longer need (KvCache::give_back).
    void give_back_kv();
    // Sliding windows: whether no query at `length` or later reads the window rows of a sequence's block
    // `index` (with a few blocks of slack, so that a turn that takes back its last tokens keeps its window);
    // the first index that is not; and the bookkeeping as a sequence takes, drops and leaves behind blocks.
    bool behind_window(int32_t index, int32_t length) const;
    int32_t first_in_window(int32_t length) const;
    void hold_window(int32_t block) { if (window_ > 0) ++in_window_[static_cast<size_t>(block)]; }
    void drop_window(int32_t block, bool still_held);
    void advance_window(Sequence& s);
    void publish_full_blocks(Sequence& s);
    StepGraph& graph_for(const cellm_batch_shape& shape);
    void run_step(std::span<const Work> work, int32_t n_tokens, int32_t n_outputs, int32_t max_blocks,
                  std::vector<float>& logits);

    const Model* model_;
    Backend* backend_;
    EngineOptions options_;
    std::unique_ptr<WeightStore> weights_;
    std::unique_ptr<KvCache> kv_;
    std::unique_ptr<StatePool> states_;  // one slot per sequence that may be live at once (max_sequences)
    MemorySplit memory_;
    int32_t window_ = 0;              // KvCache::window() when options_.release_window, else 0
    std::vector<int32_t> in_window_;  // per block: sequences holding it that may still read its window rows
    std::vector<Sequence> sequences_;
    // Prepared graphs by (n_tokens, n_seqs, n_outputs, max_blocks, n_embd_rows), least recently used evicted
    // past a bound.
    using GraphKey = std::tuple<int32_t, int32_t, int32_t, int32_t, int32_t>;
    std::map<GraphKey, std::unique_ptr<StepGraph>> graphs_;
    std::vector<GraphKey> graph_order_;
    StepGraph::Inputs inputs_;
    int64_t prefix_hit_tokens_ = 0, prefix_hit_blocks_ = 0, copied_blocks_ = 0;
};

}  // namespace cellm
