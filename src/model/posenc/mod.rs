//! Position encodings: what each one adds to the graph of one sequence length.
//!
//! An encoding contributes terms at fixed places in the Transformer: an additive `[L, d_model]`
//! term at the input or at each block's input (the same for every block, or FLOATER's own per
//! block), or an additive attention bias shared by every layer: TUPE's `[H, L, L]` tensor, or
//! T5's table and buckets, which the attention op looks up in its kernels; or RoPE's rotation of
//! every layer's queries and keys by a constant `[L, Dh]` table. TUPE also changes the attention
//! op's scale; FLOATER's solve reports a status to check after each run. Where the tokens sit
//! (0..L, or Ruoss et al.'s randomized positions) is `positions.rs`'s, the same for every
//! encoding.
//!
//! Each encoding is one file: its settings (a serde struct with its defaults), their checks, its
//! parameters and its terms for every model shape, and what the viewer says of it, behind the
//! [`Encoding`] trait. [`PosEnc`] (the registry) picks one by the config's `type`. A new encoding
//! is a file here and a line in `registry.rs`.

mod alibi;
mod encoding;
mod floater;
mod floater_choices;
mod learned;
mod none;
mod positions;
mod registry;
mod relative;
mod rope;
mod sinusoidal;
mod tupe;

pub use alibi::{Alibi, alibi_slopes, alibi_table};
pub(crate) use encoding::is_default;
pub use encoding::{
    AttentionTerms, Constant, Description, Drawn, Encoding, EncodingSource, ModelDims, ModelFacts,
    PositionTerms, Preset, Presets, TermInputs,
};
pub use floater::{
    ENCODINGS_INPUT, FloaterConfig, FloaterForm, GradientMethod, Nonlinearity, QKV_INITIAL_NAME,
    SolverMethod, encodings_shape, old_layout, qkv_initial_from_static_biases,
};
pub use learned::Learned;
pub use none::NoEncoding;
pub use positions::{
    MAX_RANDOM_POSITIONS, POSITIONS_INPUT, PairOffsets, Positions, Sampled, sample_positions,
};
#[cfg(test)]
pub(crate) use registry::every_form;
pub use registry::{PosEnc, TYPES, preset, presets};
pub use relative::{Relative, bucket_matrix, buckets_by_offset, cls_bucket_matrix, relative_bucket};
pub use rope::Rope;
pub use sinusoidal::{SinusoidLayout, Sinusoidal, fairseq_table, sinusoid_table, sinusoidal_table};
pub use tupe::{TupeA, TupeForm, TupeR};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::Graph;
    use crate::ops::attention::AttentionBias;

    /// d_model 8, 2 heads, 1 layer, a table of 4.
    fn dims(bidirectional: bool) -> ModelDims {
        ModelDims {
            d_model: 8,
            heads: 2,
            layers: 1,
            max_len: 4,
            bidirectional,
        }
    }

    const RELATIVE: Relative = Relative {
        buckets: 8,
        max_distance: 20,
        learned_absolute: false,
    };

    /// The encoder's buckets are bidirectional, the causal LM's look only back; the bias is the
    /// table `[buckets, heads]` and the bucket of each offset `[2L − 1]`, nothing is `[L, L]`, and
    /// nothing is added to the input.
    #[test]
    fn relative_terms_use_the_kind_s_bucket_layout() {
        for bidirectional in [true, false] {
            let kind = if bidirectional { "encoder" } else { "causal LM" };
            let mut g = Graph::new();
            let terms = RELATIVE
                .terms(
                    &mut g,
                    dims(bidirectional),
                    Positions::contiguous(6),
                    EncodingSource::Solve,
                )
                .unwrap();
            assert!(terms.at_input.is_none() && terms.at_block.is_empty());
            let Some(AttentionBias::Bucketed(bias)) = terms.attention.bias else {
                panic!("{kind:?}: {:?}", terms.attention.bias)
            };
            assert_eq!(g.info(bias.table).meta.shape, [8, 2]);
            assert_eq!(g.info(bias.buckets).meta.shape, [11]);
            let [(input, Constant::I32(buckets))] = terms.inputs.constants.as_slice() else {
                panic!(
                    "{kind:?}: expected one i32 constant, got {:?}",
                    terms.inputs.constants
                );
            };
            assert_eq!(*input, bias.buckets);
            assert_eq!(buckets, &buckets_by_offset(6, bidirectional, 8, 20), "{kind:?}");
        }
    }

    /// TUPE adds nothing to the input, scales the word term by 1/√(2·Dh), and feeds the buckets
    /// of the kind's layout (TUPE-R) and the three [CLS] masks (with untie_cls).
    #[test]
    fn tupe_terms_scale_the_word_term_and_feed_their_constants() {
        let tupe_r = |untie_cls| {
            PosEnc::TupeR(TupeR {
                untie_cls,
                buckets: 8,
                max_distance: 20,
                form: TupeForm::Paper,
            })
        };
        let cases = [
            (
                false,
                PosEnc::TupeA(TupeA {
                    untie_cls: false,
                    form: TupeForm::Paper,
                }),
                None,
                0,
            ),
            (false, tupe_r(false), Some(false), 1),
            (true, tupe_r(true), Some(true), 4),
        ];
        for (encoder, posenc, bidirectional, n_constants) in cases {
            let mut g = Graph::new();
            let terms = posenc
                .terms(
                    &mut g,
                    dims(encoder),
                    Positions::contiguous(4),
                    EncodingSource::Solve,
                )
                .unwrap();
            assert!(terms.at_input.is_none() && terms.at_block.is_empty());
            let Some(AttentionBias::Dense(bias)) = terms.attention.bias else {
                panic!("{posenc:?}: {:?}", terms.attention.bias)
            };
            assert_eq!(g.info(bias).meta.shape, [2, 4, 4]);
            // d_model 8, 2 heads: Dh = 4.
            assert_eq!(terms.attention.scale, Some(1.0 / 8f32.sqrt()), "{posenc:?}");
            assert_eq!(terms.inputs.constants.len(), n_constants, "{posenc:?}");
            if let Some(bidirectional) = bidirectional {
                let Some((_, Constant::I32(buckets))) = terms.inputs.constants.first() else {
                    panic!(
                        "{posenc:?}: expected the buckets first, got {:?}",
                        terms.inputs.constants
                    );
                };
                assert_eq!(buckets, &bucket_matrix(4, bidirectional, 8, 20), "{posenc:?}");
            }
        }
    }

    /// Every registered type reads from its table (TUPE's with its one required setting), writes
    /// back a table that reads the same, names and describes itself, and builds its terms.
    #[test]
    fn every_registered_encoding_reads_writes_and_builds() {
        for ty in TYPES {
            let required = if ty.starts_with("tupe") {
                "\nuntie_cls = false"
            } else {
                ""
            };
            let posenc: PosEnc = toml::from_str(&format!("type = \"{ty}\"{required}")).unwrap();
            let json = serde_json::to_string(&posenc).unwrap();
            assert!(json.starts_with(&format!(r#"{{"type":"{ty}""#)), "{json}");
            assert_eq!(serde_json::from_str::<PosEnc>(&json).unwrap(), posenc, "{json}");
            assert!(!posenc.name().is_empty(), "{ty}");
            assert!(!posenc.describe(dims(true), false, 4).note.is_empty(), "{ty}");
            let mut g = Graph::new();
            posenc
                .terms(
                    &mut g,
                    dims(true),
                    Positions::contiguous(4),
                    EncodingSource::Solve,
                )
                .unwrap();
        }
    }

    /// Configs as checkpoints stored them before each encoding had a file of its own read and
    /// write unchanged.
    #[test]
    fn stored_configs_read_and_write_unchanged() {
        for stored in [
            r#"{"type":"none"}"#,
            r#"{"type":"sinusoidal","every_block":false}"#,
            r#"{"type":"learned"}"#,
            r#"{"type":"relative","buckets":32,"max_distance":128}"#,
            r#"{"type":"relative","buckets":32,"max_distance":128,"learned_absolute":true}"#,
            r#"{"type":"tupe_a","untie_cls":true}"#,
            r#"{"type":"tupe_r","untie_cls":true,"buckets":32,"max_distance":128,"form":"code"}"#,
            r#"{"type":"rope","base":10000.0}"#,
            r#"{"type":"alibi"}"#,
        ] {
            let posenc: PosEnc = serde_json::from_str(stored).unwrap();
            assert_eq!(serde_json::to_string(&posenc).unwrap(), stored);
        }
    }

    /// A setting's error names the encoding and the key; an unknown type lists the known ones.
    #[test]
    fn bad_settings_name_their_encoding_and_key() {
        let err = |text: &str| toml::from_str::<PosEnc>(text).unwrap_err().to_string();
        let e = err("type = \"floater\"\nsubsteps = -1");
        assert!(
            e.contains("floater: `substeps`: invalid value: integer `-1`, expected usize"),
            "{e}"
        );
        let e = err("type = \"rope\"\nbuckets = 3");
        assert!(
            e.contains("rope: unknown field `buckets`, expected `base`"),
            "{e}"
        );
        let e = err("type = \"tupe_a\"");
        assert!(e.contains("tupe_a: missing field `untie_cls`"), "{e}");
        let e = err("type = \"xpos\"");
        assert!(
            e.contains("unknown variant `xpos`, expected one of `none`, `sinusoidal`"),
            "{e}"
        );
        let e = err("buckets = 3");
        assert!(e.contains("missing field `type`"), "{e}");
    }

    /// FLOATER's compatible form adds the table of its `sinusoid` layout at the input, which has
    /// the sinusoidal encoding's limits: an odd width (whose last pair would lack its cosine) is
    /// refused, as is the setting on the additive form, which adds no table.
    #[test]
    fn floater_s_input_table_takes_its_layout_and_limits() {
        let floater = |text: &str| toml::from_str::<PosEnc>(&format!("type = \"floater\"\n{text}")).unwrap();
        let fairseq = floater(r#"sinusoid = "fairseq""#);
        let mut g = Graph::new();
        let terms = fairseq
            .terms(
                &mut g,
                dims(false),
                Positions::contiguous(5),
                EncodingSource::Solve,
            )
            .unwrap();
        let table = terms.at_input.unwrap();
        let values = terms
            .inputs
            .constants
            .iter()
            .find(|(t, _)| *t == table)
            .map(|(_, c)| c);
        let Some(Constant::F32(values)) = values else {
            panic!("{:?}", terms.inputs.constants)
        };
        assert_eq!(values, &fairseq_table(5, 8));
        let facts = |d_model| ModelFacts {
            dims: ModelDims {
                d_model,
                ..dims(false)
            },
            seq2seq: false,
            reads_cls: false,
            masked_lm: false,
            random_positions: None,
        };
        let odd = floater("").check(&facts(9)).unwrap_err();
        assert!(odd.contains("d_model must be even, got 9"), "{odd}");
        let additive = floater("form = \"additive\"\nsinusoid = \"fairseq\"")
            .check(&facts(8))
            .unwrap_err();
        assert!(additive.contains("the additive form adds none"), "{additive}");
        assert!(floater("form = \"additive\"").check(&facts(9)).is_ok());
    }

    /// FLOATER cautions where randomized positions solve its flow past the t its authors solve to
    /// (255 positions at Δ 0.01), not where its Δ keeps them within it or positions are not
    /// randomized; an encoding without a flow never does.
    #[test]
    fn floater_cautions_where_randomized_positions_pass_the_authors_t() {
        let facts = |random_positions| ModelFacts {
            dims: dims(true),
            seq2seq: false,
            reads_cls: false,
            masked_lm: false,
            random_positions,
        };
        let floater = |text: &str| toml::from_str::<PosEnc>(&format!("type = \"floater\"\n{text}")).unwrap();
        let caution = floater("").encoding().caution(&facts(Some(2048))).unwrap();
        assert!(
            caution.contains("up to 2047 solve the flow to t = 20.47, past the t = 2.55"),
            "{caution}"
        );
        assert!(caution.contains("delta = 1.245725e-3 solves"), "{caution}");
        let within = floater("delta = 0.0012451171875");
        assert_eq!(within.encoding().caution(&facts(Some(2048))), None);
        assert_eq!(floater("").encoding().caution(&facts(Some(256))), None);
        assert_eq!(floater("").encoding().caution(&facts(None)), None);
        let sinusoidal = toml::from_str::<PosEnc>("type = \"sinusoidal\"").unwrap();
        assert_eq!(sinusoidal.encoding().caution(&facts(Some(2048))), None);
    }
}
