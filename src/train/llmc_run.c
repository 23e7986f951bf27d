/* amp_train_run's side of llm.c's model files (amp/llmc.h): cfg.init_from and cfg.save_llmc. */
#include "train_internal.h"

int amp_train_llmc_configure(amp_train_run_state *r) {
    amp_train_config *c = &r->cfg;
    if ((c->save_llmc || c->save_hf) && c->model.kind != AMP_MODEL_GPT2)
        return amp_train_fail(r, AMP_ERR_INVALID_ARGUMENT, "llm.c's model files hold gpt2 only, not %s",
                              amp_model_kind_name(c->model.kind));
    if (c->save_llmc_version != 0 && c->save_llmc_version != 3 && c->save_llmc_version != 5)
        return amp_train_fail(r, AMP_ERR_INVALID_ARGUMENT, "llm.c model version %d (3: fp32 or 5: bf16)",
                              c->save_llmc_version);
    if (!c->init_from) return AMP_OK;
    if (c->model.kind != AMP_MODEL_GPT2)
        return amp_train_fail(r, AMP_ERR_INVALID_ARGUMENT, "%s: llm.c's model files hold gpt2 only, not %s", c->init_from,
                              amp_model_kind_name(c->model.kind));
    amp_llmc_header h;
    const int st = amp_llmc_read_header(c->init_from, &h, r->err, r->err_size);
    if (st != AMP_OK) return st;
    if (c->model.vocab > h.vocab)
        return amp_train_fail(r, AMP_ERR_INVALID_ARGUMENT, "%s: the data's vocabulary of %lld does not fit the model's %lld",
                              c->init_from, (long long)c->model.vocab, (long long)h.vocab);
    if (c->model.context > h.max_seq_len)
        return amp_train_fail(r, AMP_ERR_INVALID_ARGUMENT, "%s: context %lld is longer than the model's %lld positions",
                              c->init_from, (long long)c->model.context, (long long)h.max_seq_len);
    amp_llmc_model_config(&h, &c->model);
    return AMP_OK;
}

int amp_train_llmc_load(amp_train_run_state *r) {
    if (!r->cfg.init_from) return AMP_OK;
    return amp_llmc_load(r->cfg.init_from, r->ctx, NULL, r->err, r->err_size);
}

int amp_train_llmc_save(amp_train_run_state *r) {
    const amp_train_config *c = &r->cfg;
    if (!c->save_llmc && !c->save_hf) return AMP_OK;
    const amp_model_config *m = &c->model;
    const amp_llmc_header h = {
        .version = c->save_llmc_version ? c->save_llmc_version : 3,
        .max_seq_len = m->positions > 0 ? m->positions : m->context,
        .vocab = m->vocab,
        .layers = m->layers,
        .heads = m->heads,
        .channels = m->hidden,
        .padded_vocab = amp_model_padded_vocab(m),
    };
    int st = c->save_llmc ? amp_llmc_save(c->save_llmc, r->ctx, &h, r->err, r->err_size) : AMP_OK;
    if (st == AMP_OK && c->save_hf) st = amp_llmc_save_hf(c->save_hf, r->ctx, &h, r->err, r->err_size);
    return st;
}
