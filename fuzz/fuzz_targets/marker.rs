//! A root's ownership marker as `gc` and `list` read it: what parses is exactly what it says.
#![no_main]

use cleanroom::marker::Marker;
use cleanroom::namespace::User;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let user = User::Uid(1000);
    if let Ok(marker) = Marker::parse(text, &user) {
        assert_eq!(marker.user, user);
        let again = serde_json::to_string(&marker).expect("a marker serializes");
        assert_eq!(Marker::parse(&again, &user), Ok(marker));
    }
});
