import Foundation
import Synchronization

/// The `Date` header's value (RFC 9110's IMF-fixdate), formatted once a second.
package enum HTTPDate {
    private static let days = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"]
    private static let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
    private static let formatted = Mutex<(second: time_t, value: String)>((0, ""))

    package static func now() -> String {
        let second = time(nil)
        return formatted.withLock { formatted in
            if formatted.second != second { formatted = (second, format(second)) }
            return formatted.value
        }
    }

    private static func format(_ second: time_t) -> String {
        var seconds = second
        var parts = tm()
        gmtime_r(&seconds, &parts)
        func two(_ value: Int32) -> String { value < 10 ? "0\(value)" : "\(value)" }
        return "\(days[Int(parts.tm_wday)]), \(two(parts.tm_mday)) \(months[Int(parts.tm_mon)]) \(1900 + parts.tm_year) "
            + "\(two(parts.tm_hour)):\(two(parts.tm_min)):\(two(parts.tm_sec)) GMT"
    }
}
