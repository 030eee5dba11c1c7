//! The demo's clips: what each one is (its kind, length, how often it occurs, its priority).
//! Below both the curators (which send them) and the audio (which renders them).

/// What kind of clip: which sound it is and where it goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ClipKind {
    /// Opens the episode, at 0 s.
    Intro,
    /// Closes it; sometimes cut off by the episode's end.
    Outro,
    Jingle,
    /// Spoken by the host, in the host's voice.
    Catchphrase,
    /// A listener's call, telephone band, played under the host's talk (talk-over).
    Voicemail,
    Ad,
}

/// One clip of the data set.
pub(crate) struct ClipSpec {
    pub(crate) title: &'static str,
    pub(crate) kind: ClipKind,
    /// Its length in seconds.
    pub(crate) seconds: f32,
    /// How often it occurs in an episode (percent), and at most how many times.
    pub(crate) percent: u32,
    pub(crate) most: u32,
    /// Its priority, as its ClipInfo says.
    pub(crate) priority: i32,
}

/// One clip's spec, in a line of [`CLIPS`].
pub(crate) const fn spec(
    title: &'static str,
    kind: ClipKind,
    seconds: f32,
    percent: u32,
    most: u32,
    priority: i32,
) -> ClipSpec {
    ClipSpec {
        title,
        kind,
        seconds,
        percent,
        most,
        priority,
    }
}

/// The clips. Sponsors want their reports first (priority 2), catchphrases are for the fan
/// wiki (1), jingles are bookkeeping (0).
pub(crate) const CLIPS: &[ClipSpec] = &[
    spec("Intro Jingle", ClipKind::Intro, 3.0, 96, 1, 0),
    spec("Outro Theme", ClipKind::Outro, 4.0, 90, 1, 0),
    spec("News Break Sting", ClipKind::Jingle, 2.5, 35, 1, 0),
    // Only in the second half of December.
    spec("Holiday Jingle", ClipKind::Jingle, 3.0, 0, 1, 0),
    // In no episode at all.
    spec("Anniversary Fanfare", ClipKind::Jingle, 3.0, 0, 1, 0),
    spec("Sweet Lord!", ClipKind::Catchphrase, 2.0, 40, 2, 1),
    spec("That's the Show", ClipKind::Catchphrase, 2.5, 30, 1, 1),
    spec("Let's Get Into It", ClipKind::Catchphrase, 2.0, 35, 1, 1),
    spec("Voicemail of the Week", ClipKind::Voicemail, 6.0, 25, 1, 1),
    spec("VPN Sponsor Read", ClipKind::Ad, 10.0, 15, 1, 2),
    spec("Meal Kit Ad", ClipKind::Ad, 8.0, 12, 1, 2),
    spec("Coffee Subscription Ad", ClipKind::Ad, 9.0, 11, 1, 2),
    // Curated late: a new clip makes new research pairs of every episode, researched or not.
    spec("Running Shoe Ad", ClipKind::Ad, 8.0, 10, 1, 3),
    spec("Tax Software Ad", ClipKind::Ad, 7.0, 9, 1, 3),
    // The new clip: in the audio all along (in the episodes of [`NEW_CLIP_EPISODES`]), curated
    // only once every pair of the others is researched, and researched from the episodes'
    // prints.
    spec("Bike Shop Ad", ClipKind::Ad, 7.0, 0, 1, 2),
];

/// How many clips, at the end of [`CLIPS`], are new: curated after the first pass.
pub(crate) const NEW_CLIPS: usize = 1;

/// The episodes (by number) the new clip was put in, once each.
pub(crate) const NEW_CLIP_EPISODES: &[u32] = &[3988, 3994, 3999, 4005, 4007];

/// Whether clip `index` of [`CLIPS`] is new (curated after the first pass).
pub(crate) fn is_new(index: usize) -> bool {
    index >= CLIPS.len() - NEW_CLIPS
}
