//! Where this process stands in a run: its rank and the world size, from the launcher's
//! environment (OpenMPI's `mpirun`, or torchrun-style variables) or from flags.

/// A rank, the world size, and the rank among the processes on this machine (which
/// picks the GPU when there are several).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Launch {
    /// This process's rank, `0..world`.
    pub rank: usize,
    /// Processes in the run (at least 1).
    pub world: usize,
    /// Rank among the processes on this machine: the launcher's
    /// `OMPI_COMM_WORLD_LOCAL_RANK` or `LOCAL_RANK`, else `rank`.
    pub local_rank: usize,
    /// Where the numbers came from, for messages: `flags`, `OMPI_COMM_WORLD_RANK/SIZE`,
    /// `RANK/WORLD_SIZE` or `single process`.
    pub from: &'static str,
}

/// A launch environment that does not describe a valid run.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum LaunchError {
    /// A launcher variable does not hold a non-negative integer.
    #[error("{var}={value:?} is not a non-negative integer")]
    NotANumber {
        /// The variable, e.g. `OMPI_COMM_WORLD_RANK`.
        var: &'static str,
        /// Its value.
        value: String,
        /// The integer parser's error.
        #[source]
        source: std::num::ParseIntError,
    },
    /// Only one of a pair is set: `--rank` without `--world-size`, `RANK` without
    /// `WORLD_SIZE`, or the other way round.
    #[error("{given} is set but {missing} is not: give both or neither")]
    Partial {
        /// The flag or variable that is set.
        given: &'static str,
        /// Its partner, which is not.
        missing: &'static str,
    },
    /// The world size is 0, or the rank is not below it.
    #[error("rank {rank} is out of range for world size {world} (from {from})")]
    Range {
        /// The rank given.
        rank: usize,
        /// The world size given.
        world: usize,
        /// Where the numbers came from (as [`Launch::from`]).
        from: &'static str,
    },
    /// A flag disagrees with the launcher's variables.
    #[error("{flag} says {flag_value} but the launcher's {var} says {env_value}")]
    Conflict {
        /// `--rank` or `--world-size`.
        flag: &'static str,
        /// The flag's value.
        flag_value: usize,
        /// The launcher's variables, e.g. `OMPI_COMM_WORLD_RANK/SIZE`.
        var: &'static str,
        /// The launcher's value.
        env_value: usize,
    },
}

impl Launch {
    /// A process on its own.
    pub fn single() -> Self {
        Launch {
            rank: 0,
            world: 1,
            local_rank: 0,
            from: "single process",
        }
    }

    /// Resolves the launch from `--rank/--world-size` and this process's environment.
    pub fn detect(rank: Option<usize>, world: Option<usize>) -> Result<Self, LaunchError> {
        Self::resolve(rank, world, &|k| std::env::var(k).ok())
    }

    /// As [`Launch::detect`], reading variables through `env`. Flags win, but must agree
    /// with a launcher that also set the numbers; then OpenMPI's variables, then
    /// torchrun's; with none of them, a single process.
    pub fn resolve(
        rank: Option<usize>,
        world: Option<usize>,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, LaunchError> {
        let num = |var: &'static str| -> Result<Option<usize>, LaunchError> {
            match env(var) {
                None => Ok(None),
                Some(v) => v
                    .trim()
                    .parse()
                    .map(Some)
                    .map_err(|source| LaunchError::NotANumber {
                        var,
                        value: v,
                        source,
                    }),
            }
        };
        let pair =
            |r: &'static str, w: &'static str| -> Result<Option<(usize, usize)>, LaunchError> {
                match (num(r)?, num(w)?) {
                    (Some(a), Some(b)) => Ok(Some((a, b))),
                    (None, None) => Ok(None),
                    (Some(_), None) => Err(LaunchError::Partial {
                        given: r,
                        missing: w,
                    }),
                    (None, Some(_)) => Err(LaunchError::Partial {
                        given: w,
                        missing: r,
                    }),
                }
            };
        let ompi = pair("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE")?;
        let torch = pair("RANK", "WORLD_SIZE")?;
        let local = match num("OMPI_COMM_WORLD_LOCAL_RANK")? {
            Some(l) if ompi.is_some() => Some(l),
            _ => num("LOCAL_RANK")?,
        };
        let launcher = ompi
            .map(|p| (p, "OMPI_COMM_WORLD_RANK/SIZE"))
            .or(torch.map(|p| (p, "RANK/WORLD_SIZE")));

        let (rank, world, from) = match (rank, world) {
            (Some(r), Some(w)) => {
                if let Some(((er, ew), var)) = launcher {
                    if er != r {
                        return Err(conflict("--rank", r, var, er));
                    }
                    if ew != w {
                        return Err(conflict("--world-size", w, var, ew));
                    }
                }
                (r, w, "flags")
            }
            (Some(_), None) => {
                return Err(LaunchError::Partial {
                    given: "--rank",
                    missing: "--world-size",
                })
            }
            (None, Some(_)) => {
                return Err(LaunchError::Partial {
                    given: "--world-size",
                    missing: "--rank",
                })
            }
            (None, None) => match launcher {
                Some(((r, w), var)) => (r, w, var),
                None => return Ok(Self::single()),
            },
        };
        if world == 0 || rank >= world {
            return Err(LaunchError::Range { rank, world, from });
        }
        Ok(Launch {
            rank,
            world,
            local_rank: local.unwrap_or(rank),
            from,
        })
    }

    /// Whether the run has more than one process.
    pub fn is_distributed(&self) -> bool {
        self.world > 1
    }
}

fn conflict(
    flag: &'static str,
    flag_value: usize,
    var: &'static str,
    env_value: usize,
) -> LaunchError {
    LaunchError::Conflict {
        flag,
        flag_value,
        var,
        env_value,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolve(
        rank: Option<usize>,
        world: Option<usize>,
        vars: &[(&str, &str)],
    ) -> Result<Launch, LaunchError> {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Launch::resolve(rank, world, &|k| {
            vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
        })
    }

    #[test]
    fn nothing_set_is_a_single_process() {
        assert_eq!(resolve(None, None, &[]).unwrap(), Launch::single());
    }

    #[test]
    fn openmpi_variables_come_before_torchrun_ones() {
        let l = resolve(
            None,
            None,
            &[
                ("OMPI_COMM_WORLD_RANK", "3"),
                ("OMPI_COMM_WORLD_SIZE", "4"),
                ("OMPI_COMM_WORLD_LOCAL_RANK", "1"),
                ("RANK", "0"),
                ("WORLD_SIZE", "1"),
            ],
        )
        .unwrap();
        assert_eq!((l.rank, l.world, l.local_rank), (3, 4, 1));
        let t = resolve(
            None,
            None,
            &[("RANK", "2"), ("WORLD_SIZE", "3"), ("LOCAL_RANK", "0")],
        )
        .unwrap();
        assert_eq!(
            (t.rank, t.world, t.local_rank, t.from),
            (2, 3, 0, "RANK/WORLD_SIZE")
        );
    }

    #[test]
    fn flags_must_agree_with_the_launcher() {
        let env = [("OMPI_COMM_WORLD_RANK", "1"), ("OMPI_COMM_WORLD_SIZE", "2")];
        assert_eq!(resolve(Some(1), Some(2), &env).unwrap().from, "flags");
        assert!(matches!(
            resolve(Some(0), Some(2), &env),
            Err(LaunchError::Conflict { flag: "--rank", .. })
        ));
        // Without a launcher the flags decide; the local rank defaults to the rank.
        let l = resolve(Some(1), Some(2), &[]).unwrap();
        assert_eq!((l.rank, l.world, l.local_rank), (1, 2, 1));
    }

    #[test]
    fn bad_values_are_named() {
        let e = resolve(None, None, &[("RANK", "x"), ("WORLD_SIZE", "2")]).unwrap_err();
        assert_eq!(e.to_string(), "RANK=\"x\" is not a non-negative integer");
        let cause = std::error::Error::source(&e).expect("the parser's error is kept");
        assert!(cause.is::<std::num::ParseIntError>());
        assert!(matches!(
            resolve(None, None, &[("RANK", "1")]),
            Err(LaunchError::Partial {
                missing: "WORLD_SIZE",
                ..
            })
        ));
        assert!(matches!(
            resolve(Some(2), Some(2), &[]),
            Err(LaunchError::Range { .. })
        ));
        assert!(matches!(
            resolve(Some(0), None, &[]),
            Err(LaunchError::Partial { .. })
        ));
    }
}
