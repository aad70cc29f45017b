import CumulusModel

/// Change tags: short opaque strings derived from the zone change sequence of a record's last write.
public enum ChangeTag {
    /// The change tag of a write with this sequence number.
    public static func make(_ sequence: Int64) -> String {
        String(sequence, radix: 36)
    }
}
